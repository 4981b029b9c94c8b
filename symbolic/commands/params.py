"""memsym params: parameters per layer kind, per pipeline stage and in total (Tables 3-4)."""
from __future__ import annotations

from ..render import fmt_gib, fmt_int
from . import common


def add_parser(sub):
    p = sub.add_parser("params", help="parameters per layer kind, per stage and in total (Tables 3-4)",
                       description="Parameter counts per layer kind (Table 3), per pipeline stage (Table 4 for "
                                   "PP=16) and in total, exact. --accounting paper (default) counts what the paper "
                                   "counts; checkpoint also counts the tensors a real checkpoint has and the paper "
                                   "leaves out (final RMSNorm; noaux_tc routing bias), each as its own row.")
    common.add_model_option(p)
    p.add_argument("--pp", type=common.positive_int, default=16, help="pipeline stages (default 16)")
    p.add_argument("--layers-per-stage", type=common.int_list, default=None, metavar="N,N,...",
                   help="explicit pipeline split")
    p.add_argument("--accounting", choices=["paper", "checkpoint"], default="paper",
                   help="paper (default) or checkpoint (every tensor of a real checkpoint)")
    common.add_json_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from .. import config as cfg
    from ..numeric import exact
    from derivations import build
    from derivations.device import stage_params
    model = common.model_from_args(args)
    layout = cfg.Layout(pp=args.pp, layers_per_stage=args.layers_per_stage)
    if args.pp > model.l:
        raise cfg.ConfigError("pp-layers", f"PP={args.pp} is larger than the {model.l} layers of {model.name}")
    rows, total = stage_params(model, layout, args.accounting)
    terms = build(model)
    kinds = {}
    base = cfg.substitution(model)
    for kind, tid in (("dense_layer", "params.layer.dense"), ("moe_layer", "params.layer.moe"),
                      ("mla", "params.mla"), ("norm", "params.norm"), ("embedding", "params.embedding"),
                      ("head", "params.head")):
        kinds[kind] = exact(terms[tid], base)
    whole = cfg.whole_model(model)
    extras = {}
    if args.accounting == "checkpoint":
        term = terms["params.stage.checkpoint"]
        sub = cfg.substitution(model, None, None, whole)
        extras = {p.key: exact(p.expr, sub) for p in term.parts if p.key != "paper"}
    data = {
        "model": model.name, "accounting": args.accounting, "pp": args.pp,
        "layer_kinds": {"dense": whole.dense, "moe": whole.moe},
        "per_layer": kinds,
        "stages": [{"stage": c.index, "layers": [c.layers.start, c.layers.stop - 1], "dense_layers": c.dense,
                    "moe_layers": c.moe, "embedding": c.embedding, "head": c.head, "params": p,
                    "bf16_bytes": p * 2, "parts": parts} for c, p, parts in rows],
        "checkpoint_only": extras,
        "total": total,
    }
    if args.json:
        common.print_json(data)
        return 0
    print(f"memsym params: {model.name}, {args.accounting} accounting, PP={args.pp}")
    print(f"layers: {whole.dense} dense, {whole.moe} MoE")
    print()
    print(f"{'per layer kind':<32}{'params':>20}{'BF16 GiB':>12}")
    for k, v in kinds.items():
        print(f"  {k:<30}{fmt_int(v):>20}{fmt_gib(2 * v):>12}")
    print()
    print(f"{'stage':<8}{'layers':<14}{'content':<34}{'params':>20}{'BF16 GiB':>12}")
    for c, p, _ in rows:
        content = ", ".join(x for x in (["embedding"] if c.embedding else []) +
                            ([f"{c.dense} dense"] if c.dense else []) + ([f"{c.moe} MoE"] if c.moe else []) +
                            (["head"] if c.head else []))
        print(f"{c.index:<8}{c.label.replace('layers ', '').replace('layer ', ''):<14}{content:<34}"
              f"{fmt_int(p):>20}{fmt_gib(2 * p):>12}")
    for k, v in extras.items():
        print(f"  includes checkpoint-only {k}: {fmt_int(v)}")
    print(f"{'total':<56}{fmt_int(total):>20}{fmt_gib(2 * total):>12}")
    return 0
