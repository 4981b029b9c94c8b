"""Megatron-Core's fine-grained activation offloading (derivations/assembly/offload.py, ``--offload-activations``).

The expected bytes are computed by hand from Megatron-LM d98e8a64's code (which tensor each module's group
encloses, fine_grained_activation_offload.py's 2^20-element threshold) at the offloading test's proxy
(h 1024, 32 heads, q/kv LoRA 1536/512, v_head_dim 128, 32 experts top-4, TP2 SP2 EP4, b 1, s 4096), and checked
against ``memsym estimate --tensors`` (the per-tensor listing, built from the sympy tensor lists, not from the
generated tables offloading reads)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations.assembly import offload
from derivations.assembly.conventions import tensor_rows
from derivations.assembly.device import estimate
from derivations.config.switches import with_preset
from memsym.cli import main

PAPER = Path(__file__).resolve().parent.parent / "paper"
ALL = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
b, s, h, n_tp, SP = 1, 4096, 1024, 16, 2  # 32 heads / TP 2
#: each module's saved tensors at the proxy, by hand (bytes, BF16): Megatron's code, not memsym's lists
BY_HAND = {
    "attn_norm": 2 * b * s * h // SP,              # the layer input (CheckpointWithoutOutput under layernorm recompute)
    # c_Q and c_KV, the latent norms' inputs, on the sequence-parallel shard: the down-projections are TELinear
    # parallel_mode='duplicated' (multi_latent_attention.py _qkv_down_projection: [s / TP, b, q_lora_rank])
    "qkv_linear": 2 * b * s * (1536 + 512) // SP,
    "core_attn": 2 * b * n_tp * s * s,             # the softmax output (q, k, v: recomputed, mla_up_proj)
    "attn_proj": 2 * b * s * n_tp * 128,           # linear_proj's input
    "mlp_norm": 2 * b * s * h // SP,               # the MoE sublayer input
    # the permuted tokens: each EP rank routes its own sequence-parallel shard and receives what its EP peers send
    # its local experts, b s N_r / SP copies balanced (token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess,
    # output_splits; the mcore-te preset's routed_tokens = "dispatch")
    "expert_fc1": 2 * (b * s * 4 // SP) * h,
    "moe_act": 2 * 2 * (b * s * 4 // SP) * 1024,   # the fc1 output, gate and up
}


def proxy(offloaded=ALL, **kw):
    model = cfg.load_model(str(PAPER / "models" / "mcore-proxy-h1024-l15-d3.json"))
    layout = cfg.Layout(dp=2, tp=2, pp=2, ep=4, etp=1, cp=1, sp=2, layers_per_stage=(9, 6))
    t = with_preset(cfg.Training(mbs=1, seq=4096, recompute="custom",
                                 recompute_ops=("norm", "mla_up", "swiglu", "ffn")),
                    "mcore-te")
    return model, layout, replace(t, offload=tuple(offloaded), attention="eager", **kw)  # unfused attention


def test_each_module_offloads_exactly_its_saved_tensors():
    model, layout, t = proxy()
    values = cfg.named(model, layout, t, cfg.stage(model, layout, 1))
    from derivations import evaluate as ev
    got = offload.tensors(model, t, ev.derived(values))
    per_module = {}
    for kind in ("mla", "moe"):
        for module, _, byts in got[kind]:
            per_module[module] = per_module.get(module, 0) + byts
    assert per_module == BY_HAND
    # the same tensors as the per-tensor listing names them (its keys are the generated tables' keys)
    rows, _ = tensor_rows(model, layout, replace(t, offload=()), 1)
    listed = {(r.sublayer, r.part.key): r.bytes for r in rows}
    for kind, sub in (("mla", "MLA"), ("moe", "MoE")):
        for _, key, byts in got[kind]:
            assert listed[(sub, key)] == byts
    # what stays: the shared experts' gate and up outputs (no module's group), the router's, dispatcher's and
    # load-balancing loss's tensors (in no group; the router runs on the rank's sequence-parallel shard of t = b s / SP
    # tokens, TopKRouter.forward: 4 t N x 3 + 8 t N_r x 2 + t N + 4 t (N_r + 1) + 4 t + 8 b N + 4) and the FP32
    # probabilities per token copy received (4 b s N_r / SP = 32,768 B: under 2^20 elements)
    kept = sum(listed.values()) - sum(BY_HAND.values())
    N, Nr, t = 32, 4, b * s // SP
    router = 3 * 4 * t * N + 2 * 8 * t * Nr + t * N + 4 * t * (Nr + 1) + 4 * t + 8 * b * N + 4
    assert kept == 2 * 2 * b * s * 1024 + router + 4 * b * s * Nr // SP


def test_small_tensors_stay_on_the_device():
    """A saved tensor of fewer than 2^20 elements is not offloaded (tensor_need_offloading_checker): at s 1024 the
    layer input is 2^19 elements."""
    model, layout, t = proxy(("attn_norm", "core_attn"))
    t = replace(t, seq=1024)
    from derivations import evaluate as ev
    got = offload.tensors(model, t, ev.derived(cfg.named(model, layout, t, cfg.stage(model, layout, 1))))
    assert [k for _, k, _ in got["mla"]] == ["softmax"]  # 16 x 1024^2 = 2^24 elements


def test_peak_keeps_one_layer_and_the_rest_less_the_offloaded():
    model, layout, t = proxy()
    t = replace(t, schedule="interleaved", vpp=4, microbatches=4, virtual_layers=(3, 2, 2, 2, 2, 2, 2, 0))
    on, off = estimate(model, layout, t, 1), estimate(model, layout, replace(t, offload=()), 1)
    layer = sum(BY_HAND.values())
    # peak state 2+2+2+1 (the head held once): 12 layer micro-batches, all offloaded but the last layer of
    # micro-batch 0's last chunk; without offloading the largest state is 3+2+2+0 (14 layer micro-batches)
    full = off.bytes["activations_per_layer"]
    head = off.outside_layers
    assert on.bytes["activations"] == 12 * (full - layer) + layer + head
    assert off.bytes["activations"] == 14 * full
    assert ("act.offload.attn_norm-qkv_linear-core_attn-attn_proj-mlp_norm-expert_fc1-moe_act"
            in on.term_ids["activations"])


def test_mtp_layer_is_the_resident_one():
    model = cfg.load_model(str(PAPER / "models" / "mcore-proxy-h1024-l15-d3-mtp1.json"))
    _, layout, t = proxy()
    t = replace(t, conventions=replace(t.conventions, mtp_activations="last-stage", mtp=True))
    comp = cfg.stage(model, layout, 1)
    assert offload.resident(model, t, comp, {"moe": 1, "dense": 1}) == 0
    assert offload.resident(model, t, cfg.stage(model, layout, 0), {"moe": 1, "dense": 2}) == 1


@pytest.mark.parametrize("extra, needle", [
    (("--offload-activations", "attn_proj"), "only with core_attn"),
    (("--offload-activations", "mlp"), "unknown offload module"),
    (("--offload-activations", "core_attn", "--recompute", "full"), "full recomputation"),
])
def test_refused_on_one_line(capsys, extra, needle):
    code = None
    try:
        code = main(["estimate", "--conventions", "mcore-te", *extra])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) <= 2 and needle in err[-1]


def test_refused_outside_megatron_core(capsys):
    try:
        code = main(["estimate", "--offload-activations", "core_attn"])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--conventions mcore" in err[0]


# --- the step moment under offloading: an offloaded layer's core-attention backward (offload.MOMENT) ---------------
#: by hand at the proxy (B_a 2, 16 heads per device, s 4096, b 1): Transformer Engine's unfused attention saves the
#: softmax output twice (its fused softmax and torch.bmm with v) and Megatron's offload hooks reload one device tensor
#: per save (fine_grained_activation_offload.py tensor_push / reload); q, k (192 wide) and v (128) are reloaded, and
#: refilled by the mla_up_proj checkpoint's recompute; bmm's backward makes the probabilities' and v's gradients
P = 2 * b * n_tp * s * s
Q, K, V = 2 * b * s * n_tp * 192, 2 * b * s * n_tp * 192, 2 * b * s * n_tp * 128
CTX = 2 * b * s * n_tp * 128


def test_moment_parts_by_hand():
    model, layout, t = proxy()
    from derivations import evaluate as ev
    values = ev.derived(cfg.named(model, layout, t, cfg.stage(model, layout, 1)))
    parts = {key: byts for key, _, byts, _ in offload.moment_parts(model, t, values)}
    assert parts == {"reloaded": 2 * P + Q + K + V, "recomputed": Q + K + V, "grads": P + V + CTX}
    # without mla_up_proj recomputation q, k and v were kept (and offloaded): reloaded once, not recomputed
    t2 = replace(t, recompute_ops=("norm", "swiglu", "ffn"))
    parts = {key: byts for key, _, byts, _ in offload.moment_parts(model, t2, values)}
    assert parts == {"reloaded": 2 * P + Q + K + V, "grads": P + V + CTX}


@pytest.mark.parametrize("change", [dict(attention="flash"), dict(offload=("attn_norm", "mlp_norm"))])
def test_no_moment_without_an_offloaded_unfused_core_attention(change):
    model, layout, t = proxy()
    from derivations import evaluate as ev
    values = ev.derived(cfg.named(model, layout, t, cfg.stage(model, layout, 1)))
    assert offload.moment_parts(model, replace(t, **change), values) == ()


def test_backward_states_follow_megatrons_interleaved_order():
    """Rank 1 of PP 2, V 4, m 4 (by hand from schedules.py's forward_backward_pipelining_with_interleaving: 6
    warm-up forwards, then F(mb, chunk) and B in the order F(0,3) B(0,3) F(1,3) B(1,3) F(2,0) B(0,2) F(3,0) B(1,2)
    F(2,1) B(0,1) F(3,1) B(1,1) F(2,2) B(0,0) F(3,2) B(1,0)): the chunks held after each forward, the backward's."""
    from derivations.assembly.schedules import backward_states
    assert backward_states(2, 4, 4, 1) == [
        ((2, 2, 2, 1), 3), ((2, 2, 2, 1), 3), ((3, 2, 2, 0), 2), ((4, 2, 1, 0), 2),
        ((4, 3, 0, 0), 1), ((4, 3, 0, 0), 1), ((4, 2, 1, 0), 0), ((3, 2, 2, 0), 0)]


def test_step_peak_is_the_moment_above_fourteen_emptied_layers():
    model, layout, t = proxy()
    t = replace(t, schedule="interleaved", vpp=4, microbatches=4, virtual_layers=(3, 2, 2, 2, 2, 2, 2, 0))
    on, off = estimate(model, layout, t, 1), estimate(model, layout, replace(t, offload=()), 1)
    left = off.bytes["activations_per_layer"] - sum(BY_HAND.values())  # what an offloaded MoE layer keeps
    # before a backward of chunks 0-2 the rank holds 14 layer micro-batches (3+2+2, 4+2+1, 4+3+0 chunks of 2 layers)
    moment = 14 * left + (2 * P + Q + K + V) + (Q + K + V) + (P + V + CTX)
    assert on.term_ids["step"] == offload.MOMENT
    assert on.bytes["activations"] + on.bytes["step"] == moment
    assert off.term_ids["step"] != offload.MOMENT
