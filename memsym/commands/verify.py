"""memsym verify: check a hand-derived formula against a term (equal / not equal, and why)."""
from __future__ import annotations

import argparse

from . import COMMANDS, common

EPILOG = r"""worked examples:

  1. The paper's M_1^A (Sec. 5.1) for one MLA layer at TP = SP = 2 (exit 0, EQUAL):

     memsym verify "4bsh/2 + 2bs(d_cq + d_c) + 4bs(d_h + d_hr)n_h/2 + 2bs d_h n_h/2
                    + 5b n_h s^2/2 + 2bs d_h n_h/2 + bsh/2" --against act.mla.layer --assume TP=2 SP=2

     The same in LaTeX gives the same verdict:
     memsym verify '\frac{4bsh}{2} + 2bs\left(d_c^{\prime} + d_c\right) + \frac{4bs(d_h + d_h^R)n_h}{2}
                    + \frac{2bs\,d_h n_h}{2} + \frac{5 b n_h s^{2}}{2} + \frac{2bs\,d_h n_h}{2}
                    + \frac{bsh}{2}' --against act.mla.layer --assume TP=2 SP=2

     Drop the /2 of the q/k term and the verdict is NOT EQUAL (exit 1): term - formula =
     -2bs n_h(d_h + d_hr), carried by the term's tensors q and k, -201,326,592 bytes at b=1, s=4096.

  2. Table 10, MoE row, one device of a 4-layer stage (N/EP = 32 substituted: EP=8, N=256):

     memsym verify "20bsh + 16bsN + 8bsN_r + 4bs(N_r/N)(96h + 256h_E) + 32bsh_E" \
         --against act.stage:moe --stage 1 --assume TP=2 SP=2 EP=8 N=256 N_s=1

     act.stage:moe selects the MoE part of the stage term; --stage 1 is shorthand for
     --assume L_d=0 L_m=4 e_E=0 e_H=0 (stage 1 of the paper's PP=16 split, Table 4).

writing formulas:
  Plain text or LaTeX, read by memsym's own parser (never evaluated as Python). Juxtaposition
  multiplies (bsh = b*s*h; a/2b = (a/2)*b, left to right); ^ or ** for integer powers; brackets
  ( ) [ ] { }; \frac \cdot \times \left \right and spacing. Runs of letters split by longest
  match against the symbols (DP, EDP, PP, d_cq, N_r stay whole). A leading "M_1^A =" is ignored.
  E, S, I, O, Q are not symbols (N is the routed-expert count).

what is substituted:
  --assume values (any symbol; a value may be a formula: SP=TP, EP=N/32) apply to both sides.
  E_token and EDP are expanded on both sides. Symbols the formula does not mention take the
  paper's conventions: bytes per element B_a=2 B_k=1 (Table 7), d_v=d_h, balanced routing,
  CP=1, ETP=1. Everything else stays symbolic. Differences are evaluated in bytes at the
  paper's configuration (DeepSeek-v3, b=1 s=4096, DP32 TP2 SP2 PP16 EP8 ETP1 CP1, stage 1).

exit codes: 0 equal, 1 not equal, 2 bad input (unknown names, malformed or refused formula).
"""


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
    p = sub.add_parser("verify", help=COMMANDS["verify"],
                       description="Verify a formula written in the paper's notation (plain text or LaTeX) against "
                                   "a term (see `memsym terms`): decides equality symbolically and, when not equal, "
                                   "prints the difference (term minus formula), the monomials that differ with the "
                                   "term's tensors that carry them, and the difference in bytes at the paper's "
                                   "configuration.",
                       epilog=EPILOG + "\n" + _symbols_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("formula", metavar="FORMULA", help="the formula (quote it; one starting with '-', such as "
                                                      "\"-bsh\", is read as the formula)")
    p.add_argument("--against", required=True, metavar="TERM",
                   help="term id (act.mla.layer), or TERM:PART[+PART] for some of its parts (act.stage:mla); "
                        "list them with `memsym terms --parts`")
    p.add_argument("--assume", nargs="+", action="extend", default=[], metavar="NAME=VALUE",
                   help="values or relations substituted on both sides: TP=2 SP=2 EP=8 (or SP=TP)")
    p.add_argument("--stage", type=common.nonneg_int, default=None, metavar="N",
                   help="substitute the composition L_d, L_m, e_E, e_H of pipeline stage N of the paper's layout "
                        "(stage 1: 4 MoE layers, as Table 10)")
    common.add_model_option(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--latex", action="store_true", help="print the result as LaTeX")
    g.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(run=run)
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
    from ..verdict import verify
    return verify(args.formula, args.against, assume=args.assume, model=args.model, stage=args.stage)


def data(args) -> dict:
    """What ``verify --json`` prints."""
    return _result(args).to_json()


def run(args) -> int:
    result = _result(args)
    if args.json:
        common.print_json(result.to_json())
    elif args.latex:
        print(result.latex())
    else:
        print(result.text())
    return result.exit_code
