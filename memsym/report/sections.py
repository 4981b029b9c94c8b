"""The report's sections in the paper's order (:data:`SECTIONS`; terms by id prefix, so a new term appears without
a template change); :func:`outline_report` lays them out as stubs, :func:`complete_report` computes them."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from derivations import families

from .blocks import Report, Section, Stub
from .equations import equation, para
from .tables import TABLE_SOURCES, TABLES, setting


@dataclass(frozen=True)
class SectionSpec:
    """A section's blocks: a table key, ``"terms"`` (of ``prefixes``, unclaimed) or ``"p:<text>"``."""

    key: str
    title: str
    source: str
    blocks: Tuple[str, ...]
    prefixes: Tuple[str, ...] = ()
    at_stage: bool = False
    parts: bool = False
    notebook: bool = True


SECTIONS: Tuple[SectionSpec, ...] = (
    SectionSpec("setting", "Configuration", "Tables 5, 7, 9", (
        "p:The model, parallel layout and training settings of this report, and the resulting memory of one device "
        "of the chosen stage. Every number below is evaluated exactly from the terms (integers and rationals); "
        "GiB means 2^30 bytes (the paper's GB).", "estimate")),
    SectionSpec("notation", "Notation", "Table 1", (
        "p:Symbols as the paper writes them, from the notation registry; derived symbols ({sym:E_token}, "
        "{sym:EDP}) are evaluated from their definitions.", "notation")),
    SectionSpec("matrices", "MLA and expert matrices", "Sec. 1, Table 2", (
        "p:The projection matrices of Multi-head Latent Attention, one SwiGLU expert, the router and the dense FFN. "
        "The tensor-parallel rule is the paper's (Sec. 3): up- and output projections split by TP, down- and RoPE "
        "projections replicated.", "table2", "terms"),
        prefixes=("params.mla", "params.norm", "params.expert", "params.dense_ffn", "params.router",
                  "params.embedding", "params.head")),
    SectionSpec("parameters", "Parameters per layer and per stage", "Sec. 2, Tables 3-4", (
        "p:A pipeline stage holds {sym:L_d} dense and {sym:L_m} MoE layers, the embedding if {sym:e_E} = 1 and the "
        "head if {sym:e_H} = 1; Table 3's rows and Table 4's stages are substitutions of params.stage.",
        "table3", "table4", "terms"), prefixes=("params",)),
    SectionSpec("static", "Static parameters per device", "Sec. 3, Tables 5-6", (
        "table5", "table6",
        "p:Per-device terms are shown at the layout and at the chosen stage's composition; "
        "{term:static.device.non_moe} and {term:static.device.moe} are the non-MoE and MoE parameters of Sec. "
        "4.", "terms"),
        prefixes=("static",), at_stage=True),
    SectionSpec("zero", "ZeRO", "Sec. 4, Tables 7-8", (
        "table7", "table8",
        "p:Non-MoE parameters {term:static.device.non_moe} (and their gradients and optimizer states) are sharded "
        "over {sym:DP}, MoE parameters {term:static.device.moe} over {sym:EDP}.", "terms"),
        prefixes=("zero",), at_stage=True),
    SectionSpec("activations", "Activations", "Sec. 5, Tables 9-10", (
        "table9",
        "p:Per-layer terms: {term:act.mla.layer} and {term:act.moe.layer} without recomputation, "
        "{term:act.mla.layer.full} and {term:act.moe.layer.full} with full recomputation; each with the tensors it "
        "keeps. Per-stage terms are shown at the chosen stage's composition.", "terms", "table10"),
        prefixes=("act",), at_stage=True, parts=True),
    SectionSpec("overheads", "Buffers and fragmentation", "Sec. 6", (
        "p:The paper gives ranges, not formulas: fragmentation adds 5% to 30% of the allocated memory and "
        "communication buffers take about 0.8 to 2 GiB per device. memsym reports both ends beside the total.",
        "overheads", "terms"), prefixes=("overhead",)),
    SectionSpec("implementations", "Measured against implementations", "memsym trace, paper/traces", (
        "p:Real implementations keep more than the paper's tensor list. memsym trace builds Hugging Face "
        "transformers' DeepseekV3ForCausalLM and Megatron-Core's GPTModel (local layer spec) from scaled-down "
        "configs on CPU and records every storage autograd saves for backward and still holds at the end of one "
        "forward pass; with --fake, "
        "DeepSeek-V3 and Moonlight-16B-A3B at their real dimensions (one dense and one MoE layer) run under torch's "
        "FakeTensorMode (no memory allocated) with deterministic balanced routing. The presets "
        "transformers and mcore are the paper's list with named switches on the tensor tags, each citing the "
        "source it models; they predict every record below to the byte but those marked unexplained (the status "
        "column), whose difference the record keeps.", "traces",
        "p:The same switches at this report's configuration: how one MoE layer's activations change from the "
        "paper's tensors to each implementation's.", "implementations")),
    SectionSpec("other", "Other terms", "memsym", (
        "p:Terms not covered by the sections above (added by extensions), at the layout and the chosen stage.",
        "terms"), prefixes=("",), at_stage=True),
    SectionSpec("steptime", "Step time (extension)", "derivations/steptime", (
        "p:How long one training step takes on this layout, from published rates only (the GPU's dense BF16 peak "
        "times an efficiency, its HBM, NVLink and network bandwidths; derivations/config/gpus.toml): compute at "
        "six FLOPs per parameter a token passes through, bounded below by reading the device's weights, each "
        "parallel group's transfers at its link, the schedule's bubble (DeepSeek-V3 report, Table 2) and the "
        "optimizer step. memsym search ranks layouts by it; nothing in it is fitted to a measured run.",
        "steptime")),
    SectionSpec("comparison", "The paper's printed numbers against memsym", "paper/printed.toml", (
        "p:Every number the paper prints, recomputed at the paper's configuration (DeepSeek-v3, DP32 TP2 PP16 EP8 "
        "ETP1), with its status: agrees (rounds to the printed value at its precision), discrepancy (a known "
        "cause, stated), UNEXPLAINED or stale (failures).", "comparison")),
)


def sections_of(ctx) -> Tuple[SectionSpec, ...]:
    """The sections of ``ctx``'s model: :data:`SECTIONS`, or those its family declares (``Family.report``)."""
    fam = families.find(getattr(ctx.model, "family", None))
    if fam is None or not fam.report:
        return SECTIONS
    return tuple(SectionSpec(**dict(spec)) for spec in fam.report_sections())


def section_term_ids(ctx) -> Dict[str, List[str]]:
    """Term ids per section: each term goes to the first section whose prefixes match it."""
    out, claimed = {}, set()
    for spec in sections_of(ctx):
        ids = [tid for tid in ctx.terms if tid not in claimed
               and any(p == "" or tid == p or tid.startswith(p + ".") for p in spec.prefixes)]
        claimed.update(ids)
        out[spec.key] = ids
    return out


def _outline_section(ctx, spec: SectionSpec, number: int, term_ids: Sequence[str]) -> Section:
    blocks = []
    for b in spec.blocks:
        if b == "terms":
            blocks += [Stub("equation", term_id=tid, provenance=ctx.terms[tid].provenance, parts=spec.parts,
                            at_stage=spec.at_stage) for tid in term_ids]
        elif b.startswith("p:"):
            blocks.append(para(ctx, b[2:]))
        else:
            blocks.append(Stub("table", key=b, source=TABLE_SOURCES.get(b, "")))
    return Section(spec.key, number, spec.title, spec.source, blocks, spec.notebook)


def outline_report(ctx) -> Report:
    """The report's non-empty sections with tables and equations as stubs (nothing computed)."""
    ids = section_term_ids(ctx)
    sections = []
    for spec in sections_of(ctx):
        has_tables = any(b != "terms" and not b.startswith("p:") for b in spec.blocks)
        if spec.prefixes and not ids[spec.key] and not has_tables:
            continue  # a section of terms only, with none to show
        sections.append(_outline_section(ctx, spec, len(sections) + 1, ids.get(spec.key, ())))
    return Report(
        title=f"Training memory of {ctx.model.name}, derived symbolically",
        subtitle="A reproduction of P. Zhang, L. Su, Memory Analysis on the Training Course of DeepSeek Models "
                 "(arXiv:2502.07846), generated by memsym",
        model=ctx.model.name, setting=setting(ctx), sections=sections)


def _compute(ctx, block):
    if not isinstance(block, Stub):
        return block
    if block.kind == "table":
        return TABLES[block.key](ctx)
    return equation(ctx, ctx.terms[block.term_id], block.at_stage, block.parts)


def complete_report(ctx, report: Report, progress: Optional[Callable[[str], None]] = None) -> Report:
    """``report`` (an :func:`outline_report`) with every stub computed; the outline is left as it is."""
    sections = []
    for s in report.sections:
        if progress:
            progress(f"section {s.title}")
        sections.append(replace(s, blocks=[_compute(ctx, b) for b in s.blocks]))
    return replace(report, sections=sections)


def build_report(ctx, outline: bool = False) -> Report:
    """The whole report for a configuration; ``outline=True``: only its :func:`outline_report`."""
    plan = outline_report(ctx)
    return plan if outline else complete_report(ctx, plan)
