"""The MLA latents under sequence parallelism (``--latents full|sp``, set by mcore-te and ``--kernels te``).

Expectations by hand from the frameworks' code, not from memsym's lists: Megatron-LM d98e8a64
transformer/multi_latent_attention.py builds the down-projections as TELinear with parallel_mode='duplicated'
(extensions/transformer_engine.py TELinear.__init__: TE gets parallel_mode None and tp_size 1, so
Transformer Engine's Linear gathers no input), so ``_qkv_down_projection`` runs them on the sequence-parallel
shard: q_compressed [s/TP, b, q_lora_rank], kv_combined [s/TP, b, kv_lora_rank + d_h^R]; the up-projections are
TELayerNormColumnParallelLinear (mla_qk_norm_config.py QKNormConfigResolver under --qk-layernorm: the latents'
norms fused), whose forward (Transformer Engine d0067d0d pytorch/module/layernorm_linear.py
_LayerNormLinear.forward) saves its input, the local norm output ln_out and rsigma, and frees the gathered
ln_out_total after the GEMM.  The k RoPE part, gathered to the whole sequence, is saved by no operation (the
unfused RoPE keeps cos and sin).  At the h 512 CUDA-graph test's proxy: h 512, q/kv LoRA 1536/512, TP2 SP2,
b 4, s 4096, BF16."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations.assembly.conventions import tensor_rows
from derivations.config.switches import CONVENTION_PRESETS, KERNEL_OVERRIDES, with_preset

PAPER = Path(__file__).resolve().parent.parent / "paper"
b, s, TP, SP, D_CQ, D_C = 4, 4096, 2, 2, 1536, 512


def rows(preset="mcore-te", sp=SP, **conv):
    model = cfg.load_model(str(PAPER / "models" / "mcore-proxy-h512-l16-d1.json"))
    layout = cfg.Layout(dp=2, tp=TP, pp=2, ep=4, etp=1, cp=1, sp=sp)
    t = with_preset(cfg.Training(mbs=b, seq=s, schedule="interleaved", vpp=4, microbatches=4), preset)
    t = replace(t, attention="eager", conventions=replace(t.conventions, **conv))
    got, _ = tensor_rows(model, layout, t, 1)
    return {(r.sublayer, r.part.key): r.bytes for r in got}


#: one layer micro-batch's latent tensors on the shard, by hand: c_Q (the q up-projection's input), c_KV (the kv
#: up-projection's input, made contiguous by TE's prepare_forward: without the d_h^R columns), the two fused norms'
#: outputs (ln_out, BF16 before any --linear-recipe) and their FP32 rsigma, one per row each
SHARD = {("MLA", "latent"): 2 * b * (s // SP) * (D_CQ + D_C),
         ("MLA", "latent_norm"): 2 * b * (s // SP) * (D_CQ + D_C),
         ("MLA", "latent_rsigma"): 2 * 4 * b * (s // SP)}


def test_mcore_te_keeps_the_latents_on_the_sequence_parallel_shard():
    got = rows()
    assert {k: got[k] for k in SHARD} == SHARD
    # the rest of the MLA is as before: the layer input and norm output already on the shard, q, k, v split by TP
    assert got[("MLA", "down_in")] == 2 * b * s * 512 // SP
    assert got[("MLA", "q")] == 2 * b * s * 32 * (128 + 64) // TP


def test_full_is_the_whole_sequence_and_changes_nothing_else():
    sp_rows, full = rows(), rows(latents="full")
    assert {k: full[k] for k in SHARD} == {k: v * SP for k, v in SHARD.items()}
    assert {k: v for k, v in sp_rows.items() if k not in SHARD} == {k: v for k, v in full.items() if k not in SHARD}


def test_without_sequence_parallelism_the_down_projections_see_the_whole_sequence():
    """TP 2 without SP: the duplicated down-projections' input is the whole sequence on every TP rank."""
    got = rows(sp=1)
    assert {k: got[k] for k in SHARD} == {k: v * SP for k, v in SHARD.items()}


def test_which_presets_split_the_latents():
    assert KERNEL_OVERRIDES["te"]["latents"] == "sp"
    assert {n: p["latents"] for n, p in CONVENTION_PRESETS.items()} == {
        "paper": "full", "megatron": "full", "modelzoo": "full", "transformers": "full",
        "mcore": "full",  # the local spec's torch RMSNorm refuses sequence parallelism (torch_norm.py)
        "mcore-te": "sp",
        # torchtitan's TP plan gathers the sequence before the attention (PrepareModuleInput to Replicate;
        # wkv_a and kv_norm NoParallel: deepseek_v3/infra/parallelize.py apply_non_moe_tp)
        "torchtitan": "full"}


@pytest.mark.parametrize("latents", ["full", "sp"])
def test_the_modelzoo_inventory_keeps_its_own_split(latents):
    """ModelZoo's rows carry their own TP (c_Q, c_KV and the q norm on the shard, the kv norm whole): untouched."""
    got = rows("modelzoo", latents=latents)
    assert got[("MLA", "mz_q_down")] == 2 * b * s * D_CQ // TP
    assert got[("MLA", "mz_kv_norm")] == 2 * b * s * D_C


def test_the_quantized_norm_outputs_follow_the_shard():
    """Under --linear-recipe tensorwise the up-projections' ln_out is kept at 1 B: b s/SP (d_cq + d_c) bytes fewer."""
    from derivations import evaluate as ev
    from derivations.assembly import quantized
    model = cfg.load_model(str(PAPER / "models" / "mcore-proxy-h512-l16-d1.json"))
    layout = cfg.Layout(dp=2, tp=TP, pp=2, ep=4, etp=1, cp=1, sp=SP)
    t = with_preset(cfg.Training(mbs=b, seq=s, schedule="interleaved", vpp=4, microbatches=4), "mcore-te")
    t = replace(t, attention="eager", linear_recipe="tensorwise").with_bytes_convention("distributed")
    values = ev.derived(cfg.named(model, layout, t, cfg.stage(model, layout, 1)))
    mla = {k: v for k, _, v, _ in quantized.parts(model, t, values)["mla"]}
    assert mla["latent_norm"] == -b * (s // SP) * (D_CQ + D_C)
