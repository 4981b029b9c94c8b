"""memsym page: an interactive calculator, one self-contained HTML file generated from the terms."""
from __future__ import annotations

import sys
import time

from symbolic.files import check_out_dir

from ..lines import one_line
from . import common


def add_parser(sub):
    common.build(sub, "page", run)


def _progress():
    """A line on stderr per step of the generation, with the seconds since the first (stdout keeps the answer)."""
    start = time.monotonic()

    def say(text):
        print(f"memsym page: {time.monotonic() - start:5.1f} s  {text}", file=sys.stderr, flush=True)
    return say


def run(args) -> int:
    from derivations.config.presets import load_model

    from ..page import write
    check_out_dir(args.out)
    page = str(write(args.out, models=[(m, load_model(m)) for m in args.model or ()], progress=_progress()))
    if args.json:
        common.print_json({"page": page})
    else:
        print(one_line(page))  # (a control character of the path as its code, memsym/lines.py)
    return 0
