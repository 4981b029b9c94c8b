"""The parts of the report that the configuration alone decides, computed without sympy: the setting, the
estimate, Sec. 6 and the implementations tables (the generated evaluators: derivations.assembly.device,
derivations.analyses.compare).  ``ctx`` is anything with the configuration's ``model``, ``layout``,
``training`` and ``stage`` (a :class:`~memsym.report.context.Context`, or plain data: a report served without
sympy); :mod:`.sections` and :mod:`.tables` use them as they are."""
from __future__ import annotations

from fractions import Fraction
from typing import Tuple

from derivations import config as cfg

from .blocks import A, C, G, I, T, Table


def shown_path(path: str) -> str:
    """A path as text: bytes that are not UTF-8 (kept by Python as surrogates) shown as ``\\xff``."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _fraction_text(v) -> str:
    """An exact number as ``7`` or ``7/2`` (:func:`memsym.report.equations.fmt_num` of a Fraction)."""
    f = Fraction(v)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def setting(ctx) -> Tuple[Tuple[str, str], ...]:
    """The report's configuration lines (model, layout, stage, training)."""
    lay, tr, st = ctx.layout, ctx.training, ctx.stage
    return (
        ("model", ctx.model.name if ctx.model.source == "preset" else
         f"{ctx.model.name} (read from {shown_path(ctx.model.source)})"),
        ("layout", f"DP={lay.dp} TP={lay.tp} PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp} "
                   f"(EDP={_fraction_text(lay.edp)}, {lay.world} GPUs)"),
        ("stage", f"{st.index} of {lay.pp} ({st.label}: {st.dense} dense, {st.moe} MoE"
                  f"{', embedding' if st.embedding else ''}{', head' if st.head else ''})"),
        ("training", f"b={tr.mbs} s={tr.seq} ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}) recompute {tr.recompute}"),
    )


def _estimate(ctx):
    """The estimate of ``ctx``'s stage, made once per context (the estimate and Sec. 6 tables show it)."""
    known = ctx.__dict__.get("_estimate")
    if known is None or known[0] != (ctx.model, ctx.layout, ctx.training, ctx.stage):
        # lazy: modules this module's importers do not need (loaded only on this path)
        from derivations.assembly.device import estimate
        known = ctx.__dict__["_estimate"] = ((ctx.model, ctx.layout, ctx.training, ctx.stage),
                                             estimate(ctx.model, ctx.layout, ctx.training, ctx.stage.index))
    return known[1]


def table_estimate(ctx) -> Table:
    est = _estimate(ctx)
    rows = [(T(k), C(est.term_ids[k]), I(est.bytes[k]), G(est.bytes[k]))
            for k in ("weights", "gradients", "optimizer", "activations")]
    rows.append((T("total"), T(""), I(est.bytes["total"]), G(est.bytes["total"])))
    rows += [(T("convention"), T(a[len("convention "):]), T(""), T(""))  # switches not at the paper's choice
             for a in est.assumptions if a.startswith("convention ")]
    tr = ctx.training
    return Table("estimate", f"Per-device memory at this configuration (ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}), "
                             f"recompute {tr.recompute}, b = {tr.mbs}, s = {tr.seq})", "memsym estimate",
                 ("component", "term", "bytes", "GiB"), A("l l r r"), tuple(rows))


def table_overheads(ctx) -> Table:
    est = _estimate(ctx)
    rows = []
    for end in ("low", "high"):
        o = est.overheads[end]
        rows.append((T(end), T(f"{float(o['f_frag']) * 100:.0f}%"), G(est.bytes["total"]), G(o["fragmentation"]),
                     G(o["buffers"]), G(o["peak"])))
    return Table("overheads", "Peak per device at both ends of the paper's ranges (GiB)", "Sec. 6",
                 ("end", "fragmentation", "allocated", "+ fragmentation", "+ buffers", "peak"), A("l r r r r r"),
                 tuple(rows))



def table_implementation_waterfall(ctx) -> Table:
    """From the paper's tensor list to each implementation's, one switch at a time, for one MoE
    layer's activations at this configuration (``memsym compare --conventions paper,P``)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.analyses.compare import waterfall
    rows = []
    for end in ("transformers", "mcore", "mcore-te"):
        wf, _, _ = waterfall(ctx.model, ctx.layout, ctx.training, end, stage=ctx.stage.index)
        q = "activations_per_layer"
        rows.append((T(end), T("paper"), T(""), T(""), I(wf.first[q]), T("")))
        for step in wf.steps:
            d = step.delta[q]
            if d:
                spec = cfg.CONVENTION_SWITCHES.get(step.name)
                rows.append((T(end), C(spec.option if spec else step.name), T(str(step.before)), T(str(step.after)),
                             I(step.values[q]), T(("+" if d > 0 else "") + f"{int(d):,}")))
    return Table("implementations", "One MoE layer's activations from the paper's tensors to each implementation's "
                                    "(bytes), one switch at a time", "memsym compare --conventions paper,P",
                 ("preset", "switch", "from", "to", "bytes", "change"), A("l l l l r r"), tuple(rows),
                 note="mcore-te is --conventions mcore --kernels te (Transformer Engine's kernels, read from their "
                      "sources, not traced).")
