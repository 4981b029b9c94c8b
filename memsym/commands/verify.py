"""memsym verify: check a hand-derived formula against a term (equal / not equal, and why)."""
from __future__ import annotations

import argparse

from . import common


def _symbols_epilog() -> str:
    from derivations.notation import REGISTRY
    rows, line = [], "symbols:"
    for name, info in REGISTRY.items():
        item = f" {name}" + (f" ({info.latex})" if info.latex != name else "")
        if len(line) + len(item) > 96:
            rows.append(line)
            line = "  "
        line += item
    rows.append(line)
    return "\n".join(rows)


def add_parser(sub):
    p = common.build(sub, "verify", run)
    p.epilog += "\n" + _symbols_epilog()
    _formula_may_start_with_minus(p)


def _formula_may_start_with_minus(p: argparse.ArgumentParser) -> None:
    """Read a word such as ``-bsh`` as an argument (the formula, a value of --assume), not as an unknown option:
    every option of verify but ``-h`` is long."""
    parse_optional = p._parse_optional

    def parse(arg_string):
        if arg_string.startswith("-") and not arg_string.startswith("--") and len(arg_string) > 1 \
                and arg_string not in p._option_string_actions:
            return None
        return parse_optional(arg_string)
    p._parse_optional = parse


def _result(args):
    from derivations.paper.verify import verify
    return verify(args.formula, args.against, assume=args.assume, model=args.model, stage=args.stage)


def data(args) -> dict:
    """What ``verify --json`` prints."""
    from ..verdict import to_json
    return to_json(_result(args))


def run(args) -> int:
    from .. import verdict
    result = _result(args)
    if args.json:
        common.print_json(verdict.to_json(result))
    else:
        print((verdict.latex if args.latex else verdict.text)(result))
    return result.exit_code
