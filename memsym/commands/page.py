"""memsym page: an interactive calculator, one self-contained HTML file generated from the terms."""
from __future__ import annotations

from ..lines import one_line
from . import COMMANDS


def add_parser(sub):
    p = sub.add_parser("page", help=COMMANDS["page"],
                       description="Writes memsym-calculator.html into DIR: one self-contained HTML file (no network "
                                   "access: no CDN, font or script fetched) with a control for every layout, training, "
                                   "schedule and conventions option of `memsym estimate`, a model preset or a pasted "
                                   "config.json, and every term of the per-device estimate updating as you type: its "
                                   "formula (MathML printed by sympy), its value in bytes and GiB, the fit verdict "
                                   "against a GPU and a stacked bar of the components. The evaluation code is printed "
                                   "from the same sympy expressions the command line evaluates (exact BigInt "
                                   "rationals). Given a GPU count, a layout search panel lists the rows of `memsym "
                                   "search` for the page's model, GPU, global batch, sequence length and schedule, in "
                                   "its order, computed in the page from the search's kernels and the step-time "
                                   "model printed the same way (floats, as the search computes them).")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--model", action="append", metavar="NAME|config.json", default=None,
                   help="a model the page offers instead of the DeepSeek presets and a pasted config.json, read as "
                        "`memsym estimate --model` reads it (a preset, or a config.json of any family memsym "
                        "reads); repeatable")
    p.add_argument("--json", action="store_true", help="print the path written as JSON")
    p.set_defaults(run=run)


def data(args) -> dict:
    from derivations.config.presets import load_model

    from ..page import write
    models = [(m, load_model(m)) for m in args.model or ()]
    return {"page": str(write(args.out, models=models, progress=_progress()))}


def _progress():
    """A line on stderr per step of the generation, with the seconds since the first (stdout keeps the answer)."""
    import sys
    import time
    start = time.monotonic()

    def say(text):
        print(f"memsym page: {time.monotonic() - start:5.1f} s  {text}", file=sys.stderr, flush=True)
    return say


def run(args) -> int:
    from symbolic.files import check_out_dir
    check_out_dir(args.out)
    out = data(args)
    if args.json:
        from .common import print_json
        print_json(out)
    else:
        print(one_line(out["page"]))  # (a control character of the path as its code, memsym/lines.py)
    return 0
