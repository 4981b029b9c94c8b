"""The step-time model's options (derivations/steptime), shared by ``search``, ``estimate --time`` and
``sensitivity --time``; and its lines as the commands print them."""
from __future__ import annotations

from derivations import config as cfg

from .argtypes import explicit, help_all, positive_int, unit_fraction
from .common import _Explicit


def add_time_options(p, with_flag: bool = False, gpu: bool = False, node: bool = True):
    """The step-time options on ``p`` (--time when ``with_flag``, --gpu when ``gpu``, --gpus-per-node when ``node``)."""
    t = p.add_argument_group("step time (derivations/steptime: the published rates of --gpu, h800 without one)")
    if node:
        t.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="N", action=_Explicit,
                       help="GPUs per node: the NVLink domain when --nvlink-domain is not given (default: the GPU's)")
    if gpu:
        t.add_argument("--gpu", default=None, metavar="NAME",
                       help="the GPU preset whose rates the step time uses (derivations/config/gpus.toml; default "
                            "h800)")
    if with_flag:
        t.add_argument("--time", action="store_true",
                       help="also estimate the step's time: compute, recomputation, each group's exposed transfers, "
                            "the bubble and the optimizer step at the slowest stage, from published rates")
    t.add_argument("--overlap", default="megatron", metavar="{none,megatron,ideal}",
                   help="transfers hidden behind compute: megatron (default: data-parallel traffic behind the step, "
                        "the context-parallel ring behind attention, under DualPipe the EP all-to-all and PP "
                        "transfers behind the paired chunks), none, or ideal (every transfer behind compute); "
                        "megatron:SWITCH,... names Megatron's switches (grad-reduce, param-gather, ep, tp, wgrad: "
                        "what --from-megatron reads)")
    t.add_argument("--nvlink-domain", type=positive_int, default=None, metavar="N", action=_Explicit,
                   help="GPUs one NVLink fabric joins at full bandwidth (default: the GPU's, derivations/config/"
                        "gpus.toml: 8 in an HGX node, 72 in an NVL72 rack); groups beyond it use the network")
    t.add_argument("--gemm-efficiency", type=unit_fraction, default=1, metavar="F", action=_Explicit,
                   help=help_all("one fraction of the GPU's peak matrix rate for every kernel, in place of the "
                                 "published tables (1 with --efficiency peak)"))
    t.add_argument("--efficiency", choices=["peak", "published"], default="published", action=_Explicit,
                   help="published (default: each kernel's and link's published achieved rate, config/"
                        "efficiency.toml) or peak (the GPU's peak rates: an upper bound on speed)")
    t.add_argument("--dispatcher", choices=["alltoall", "deepep"], default=None,
                   help=help_all("the experts' dispatch: alltoall (Megatron-Core's, every copy of a token to its "
                                 "expert's rank) or deepep (once per node, forwarded over NVLink: DeepSeek-V3 Sec. "
                                 "3.2.2); default deepep under --schedule dualpipe, else alltoall"))
    return t


def time_options(args) -> dict:
    """The step-time model's keywords of the typed options (NVLink domain None: the GPU's own)."""
    typed = explicit(args)
    if {"efficiency", "gemm_efficiency"} <= typed and args.efficiency == "published":
        raise cfg.ConfigError("gemm-efficiency", "--gemm-efficiency F is one efficiency in place of the published "
                                                 "tables: give it alone or with --efficiency peak")
    published = args.efficiency == "published" and "gemm_efficiency" not in typed
    return {"gpu": args.gpu, "overlap": args.overlap, "dispatcher": args.dispatcher,
            "efficiency": "published" if published else args.gemm_efficiency,
            "gpus_per_node": getattr(args, "nvlink_domain", None) or getattr(args, "gpus_per_node", None)}


def efficiency_text(eff) -> str:
    """The efficiency as printed: a fraction, or the published tables' (config/efficiency.toml)."""
    return "published (config/efficiency.toml)" if eff == "published" else f"{float(eff):g}"


def seconds(x: float) -> str:
    """Seconds with three significant figures at least (0.0123, 1.23, 12.3, 1,234)."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def time_lines(t: dict, gpu, attention: str = "eager") -> list:
    """``estimate --time``'s lines of ``layout_time``'s result (each within 100 columns)."""
    p = t["parts"]
    per_step = t["microbatches"] > 1 or p["bubble"] or p["optimizer"]
    exposed = ", ".join(f"{g} {seconds(p[g])}" for g in ("TP", "EP", "CP", "PP"))
    dp = f", DP {seconds(p['DP'])}" if per_step or p["DP"] else ", DP not counted (no schedule)"
    prec = t.get("precision", "bf16")
    att = f" (BF16 {gpu.rate('bf16') / 1e12:,.1f})" if prec != "bf16" else ""
    return ["", f"step time (derivations/steptime) on {gpu.name}: {gpu.rate(prec) / 1e12:,.1f} TFLOP/s {prec.upper()}",
            f"  x efficiency {efficiency_text(t['efficiency'])}; attention {t.get('attention') or attention}{att}; "
            f"overlap {t['overlap']}; dispatcher {t['dispatcher']}",
            f"  slowest stage {t['stage']}; NVLink domain of {t['nvlink_domain']} GPUs",
            f"  step        {seconds(p['step'])} s   ({t['microbatches']} micro-batch"
            f"{'es' if t['microbatches'] != 1 else ''} of {seconds(p['microbatch'])} s; "
            f"{t['tokens_per_gpu_s']:,.0f} tokens/s per GPU)",
            f"  compute     {seconds(p['compute'])} s, of which memory-bound {seconds(p['memory'])} s (HBM)",
            f"  recomputation {seconds(p['recompute'])} s   bubble {seconds(p['bubble'])} s   optimizer "
            + (f"{seconds(p['optimizer'])} s" if per_step else "not counted (no schedule)"),
            f"  exposed transfers (s): {exposed}{dp}"]


def sensitivity_lines(s: dict) -> list:
    """``sensitivity --time``'s lines for :func:`derivations.steptime.sensitivity.time_sensitivity`'s result."""
    lines = ["", f"step time T = {seconds(s['step'])} s at the slowest stage ({s['stage']}); closed-form slopes of",
             "the step-time model (derivations/steptime), the links and the stage's layers held:",
             f"  {'symbol':<8} {'dT/dx (s per unit)':>20} {'elasticity':>11}"]
    for name, d in s["wrt"].items():
        lines.append(f"  {name:<8} {d['derivative']:>20.6g} {d['elasticity']:>+11.4f}")
    return lines
