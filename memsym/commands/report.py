"""memsym report: the paper's sections regenerated as LaTeX, PDF, Markdown, HTML and notebooks."""
from __future__ import annotations

import sys
import time

from symbolic.files import check_out_dir

from ..lines import one_line
from ..report.extras import require_report
from ..report.formats import FORMATS, parse_formats
from . import common


def add_parser(sub):
    common.build(sub, "report", run, FORMATS=FORMATS, format_list=",".join(FORMATS),
                 formats=common.checked_by(parse_formats))


def progress(message: str) -> None:
    """One line on stderr."""
    print(f"memsym report: {one_line(message)}", file=sys.stderr, flush=True)


def write(ctx, out, formats, stream=None) -> int:
    """Publish the report of ``ctx``, listing the files on ``stream``: 0, or 1 if the PDF failed."""
    from ..report import publish
    start = time.monotonic()
    try:
        res = publish(ctx, out, formats, progress)
    except (RuntimeError, TimeoutError) as exc:   # nothing was written
        print(f"memsym report: error: {one_line(exc)}", file=sys.stderr)
        return 1
    for path in res.written:
        print(one_line(path), file=stream or sys.stdout)
    for note in res.notes:
        print(f"memsym report: {note}", file=sys.stderr)
    progress(f"done in {time.monotonic() - start:.1f} s")
    if res.error:
        print(f"memsym report: error: {res.error}", file=sys.stderr)
        return 1
    return 0


def run(args) -> int:
    require_report(args.formats, typed=args.formats != FORMATS)  # a missing extra fails before any work
    if args.out is not None:
        check_out_dir(args.out)
    from ..report import Context
    c = common.configuration(args)
    ctx = Context.create(args.model, c.layout, c.training, c.stage)
    common.print_defaults(args, sys.stderr, "memsym report: ")  # a progress line (stdout lists the files written)
    return write(ctx, args.out, args.formats)
