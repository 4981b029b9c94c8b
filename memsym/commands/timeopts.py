"""The step-time model's options (derivations/steptime), shared by ``search``, ``estimate --time`` and
``sensitivity --time``; and its lines as the commands print them."""
from __future__ import annotations

from derivations import config as cfg

from ..argtypes import explicit


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


def measured_lines(gpu, precision: str) -> list:
    """Under --efficiency published: whose measurements each kernel kind reads on ``gpu`` at ``precision``
    (derivations/steptime/efficiency.py measured: the GPU and the source's first word), kinds sharing both joined;
    folded at 100 columns, never inside a kind's name or a GPU's (source)."""
    import textwrap  # lazy: text output only
    from derivations.steptime.efficiency import measured
    by = {}
    for kind, t in measured(gpu, precision):
        by.setdefault((t["gpu"].upper(), t["source"].split()[0].split("/")[-1]), []).append(kind.replace(" ", "\0"))
    text = "; ".join(f"{', '.join(kinds)}: {g}'s\0({src})" for (g, src), kinds in by.items())
    return [line.replace("\0", " ") for line in textwrap.wrap(f"published: {text}", 100, initial_indent="  ",
                                                              subsequent_indent="    ", break_long_words=False)]


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
            *(measured_lines(gpu, prec) if t["efficiency"] == "published" else []),
            f"  slowest stage {t['stage']}; NVLink domain of {t['nvlink_domain']} GPUs",
            f"  step        {seconds(p['step'])} s   ({t['microbatches']} micro-batch"
            f"{'es' if t['microbatches'] != 1 else ''} of {seconds(p['microbatch'])} s; "
            f"{t['tokens_per_gpu_s']:,.0f} tokens/s per GPU)",
            f"  compute     {seconds(p['compute'])} s, of which memory-bound {seconds(p['memory'])} s (HBM)",
            f"  recomputation {seconds(p['recompute'])} s   bubble {seconds(p['bubble'])} s   optimizer "
            + (f"{seconds(p['optimizer'])} s" if per_step else "not counted (no schedule)"),
            f"  exposed transfers (s): {exposed}{dp}",
            *([f"  EP overlap: {o['paired']:.1%} of the micro-batches paired (warm-up and cool-down alone),",
               f"    {o['sms_held']:.1%} of the SMs held by the dispatch: at most {o['hidden']:.1%} of EP hidden"]
              if (o := t.get("ep_overlap")) else [])]


def sensitivity_lines(s: dict) -> list:
    """``sensitivity --time``'s lines for :func:`derivations.steptime.sensitivity.time_sensitivity`'s result."""
    lines = ["", f"step time T = {seconds(s['step'])} s at the slowest stage ({s['stage']}); closed-form slopes of",
             "the step-time model (derivations/steptime), the links, the stage's layers and the efficiency held",
             "(published: the tables' values here; how they change with b, s, N_r, a degree is not in the slopes):"
             if s["efficiency"] == "published" else f"({float(s['efficiency']):g} of peak):",
             f"  {'symbol':<8} {'dT/dx (s per unit)':>20} {'elasticity':>11}"]
    return lines + [f"  {name:<8} {d['derivative']:>20.6g} {d['elasticity']:>+11.4f}" for name, d in s["wrt"].items()]
