"""Options shared by the subcommands (model, layout, training) and output helpers."""
from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction

from .. import config as cfg


def positive_int(text: str) -> int:
    try:
        val = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if val < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return val


def nonneg_int(text: str) -> int:
    try:
        val = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if val < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return val


def int_list(text: str):
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_model_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="deepseek-v3",
                   help="preset (deepseek-v3, deepseek-v2, deepseek-v2-lite) or a Hugging Face config.json "
                        "(default: deepseek-v3, the paper's model)")


def add_layout_options(p: argparse.ArgumentParser, stage: bool = True) -> None:
    """The parallel layout of Table 5 (defaults: the paper's reference layout)."""
    g = p.add_argument_group("parallel layout (defaults: the paper's Table 5)")
    g.add_argument("--dp", type=positive_int, default=32, help="data-parallel degree DP (default 32)")
    g.add_argument("--tp", type=positive_int, default=2, help="tensor-parallel degree TP (default 2)")
    g.add_argument("--pp", type=positive_int, default=16, help="pipeline-parallel degree PP (default 16)")
    g.add_argument("--ep", type=positive_int, default=8, help="expert-parallel degree EP (default 8)")
    g.add_argument("--etp", type=positive_int, default=1, help="tensor parallelism inside an expert ETP (default 1)")
    g.add_argument("--cp", type=positive_int, default=1, help="context-parallel degree CP (default 1)")
    g.add_argument("--sp", type=positive_int, default=None,
                   help="sequence-parallel degree SP: TP (on, the default) or 1 (off)")
    g.add_argument("--layers-per-stage", type=int_list, default=None, metavar="N,N,...",
                   help="explicit pipeline split (default: the paper's, e.g. 4,...,4,1 for 61 layers at PP=16)")
    if stage:
        g.add_argument("--stage", type=nonneg_int, default=1,
                       help="pipeline stage to report (default 1, a 4-MoE-layer stage as in Tables 6, 8, 10)")


def add_training_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training (defaults: the paper's Tables 7 and 9)")
    g.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0,
                   help="ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (default 0)")
    g.add_argument("--recompute", choices=list(cfg.RECOMPUTE), default="none",
                   help="activation recomputation: none or full (default none)")
    g.add_argument("--mbs", type=positive_int, default=1, help="micro-batch size b (default 1)")
    g.add_argument("--seq", type=positive_int, default=4096, help="sequence length s (default 4096)")


def add_json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def model_from_args(args) -> cfg.ModelSpec:
    return cfg.load_model(args.model)


def layout_from_args(args) -> cfg.Layout:
    return cfg.Layout(dp=args.dp, tp=args.tp, pp=args.pp, ep=args.ep, etp=args.etp, cp=args.cp, sp=args.sp,
                      layers_per_stage=args.layers_per_stage)


def training_from_args(args) -> cfg.Training:
    return cfg.Training(mbs=args.mbs, seq=args.seq, zero=args.zero, recompute=args.recompute)


def _default(o):
    if isinstance(o, Fraction):
        return int(o) if o.denominator == 1 else float(o)
    if isinstance(o, range):
        return [o.start, o.stop - 1]
    raise TypeError(f"cannot serialise {type(o).__name__}")


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=_default)
    sys.stdout.write("\n")
