"""memsym estimate: the per-device memory of one stage (Tables 6, 8, 10; Sec. 6)."""
from __future__ import annotations

from .. import config as cfg
from ..render import fmt_gib, fmt_int
from . import common


def add_parser(sub):
    p = sub.add_parser("estimate", help="per-device memory breakdown of one pipeline stage",
                       description="Per-device parameters and bytes (weights, gradients, optimizer states, one "
                                   "micro-batch's activations) of one pipeline stage, exact. Defaults are the "
                                   "paper's reference layout (Table 5: DP32 TP2 PP16 EP8 ETP1), stage 1, ZeRO 0, "
                                   "mbs 1, seq 4096, no recomputation. Buffers and fragmentation (Sec. 6) are "
                                   "reported separately at both ends of the paper's ranges, not in the total.")
    common.add_model_option(p)
    common.add_layout_options(p)
    common.add_training_options(p)
    common.add_json_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from derivations.device import estimate
    model = common.model_from_args(args)
    est = estimate(model, common.layout_from_args(args), common.training_from_args(args), args.stage)
    if args.json:
        common.print_json(est.to_json())
        return 0
    print(render_text(est))
    return 0


def render_text(est) -> str:
    lay, tr, st = est.layout, est.training, est.stage
    kinds = []
    if st.embedding:
        kinds.append("embedding")
    if st.dense:
        kinds.append(f"{st.dense} dense layer{'s' * (st.dense != 1)}")
    if st.moe:
        kinds.append(f"{st.moe} MoE layer{'s' * (st.moe != 1)}")
    if st.head:
        kinds.append("output head")
    lines = [
        f"memsym estimate: {est.model.name}, one device of stage {st.index} of {lay.pp} ({st.label}: {', '.join(kinds)})",
        f"layout DP={lay.dp} TP={lay.tp} PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp} "
        f"(EDP={fmt_int(lay.edp)}); ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}); recompute {tr.recompute}; "
        f"b={tr.mbs} s={tr.seq}",
        "",
        f"{'parameters on the device':<28}{'params':>18}",
        f"{'  non-MoE (P_n)':<28}{fmt_int(est.params['non_moe']):>18}",
        f"{'  MoE (P_m)':<28}{fmt_int(est.params['moe']):>18}",
        f"{'  total':<28}{fmt_int(est.params['total']):>18}",
        "",
        f"{'bytes on the device':<28}{'bytes':>18}{'GiB':>10}  term",
    ]
    for k in ("weights", "gradients", "optimizer", "activations"):
        lines.append(f"  {k:<26}{fmt_int(est.bytes[k]):>18}{fmt_gib(est.bytes[k]):>10}  {est.term_ids[k]}")
    lines.append(f"  {'total':<26}{fmt_int(est.bytes['total']):>18}{fmt_gib(est.bytes['total']):>10}")
    lines.append(f"  {'(one MoE layer, act.)':<26}{fmt_int(est.bytes['activations_per_layer']):>18}"
                 f"{fmt_gib(est.bytes['activations_per_layer']):>10}  {est.term_ids['activations_per_layer']}")
    lines.append("")
    lines.append("Sec. 6 overheads (not in the total): fragmentation 5%-30% of allocated memory, buffers 0.8-2 GiB")
    for end in ("low", "high"):
        o = est.overheads[end]
        lines.append(f"  {end:<5} f_frag={float(o['f_frag']):.2f} +{fmt_gib(o['fragmentation'])} GiB, buffers "
                     f"{fmt_gib(o['buffers'])} GiB -> peak {fmt_gib(o['peak'])} GiB")
    return "\n".join(lines)
