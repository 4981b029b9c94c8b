"""The presets against measured traces (paper/traces/*.toml).

Fast tests (no torch): every record the transformers preset claims is predicted to the byte,
per layer and outside the layers; a record marked unexplained keeps its recorded difference;
an independent transcription of transformers' saved tensors (from modeling_deepseek_v3.py,
not from derivations/families/deepseek/activations.py) agrees with the preset at other dims.  Slow tests
(marker ``trace``, need ``pip install 'memsym[trace]'``): re-trace every record and a
generated config with other dims, and compare to the records / the preset.
"""
import json
import os
from pathlib import Path

import pytest

from memsym.cli import main
from memsym.trace import records

RECORDS = records.load_all()
IDS = [r["_file"] for r in RECORDS]
ROOT = Path(__file__).resolve().parents[1]


def test_records_exist_and_cover_the_settings():
    assert len(RECORDS) >= 7
    seen = {k: {r["settings"][k] for r in RECORDS} for k in ("mbs", "act_dtype", "attention", "experts", "recompute")}
    assert seen["mbs"] >= {1, 2} and seen["act_dtype"] >= {"bf16", "fp32"} and seen["recompute"] >= {"none", "full"}
    assert seen["attention"] >= {"eager", "sdpa"} and seen["experts"] >= {"loop", "grouped"}
    assert len({r["config"]["path"] for r in RECORDS}) >= 2


@pytest.mark.parametrize("rec", RECORDS, ids=IDS)
def test_record_config_is_the_one_measured(rec):
    assert records.sha256(rec["config"]["path"]) == rec["config"]["sha256"]


@pytest.mark.parametrize("rec", RECORDS, ids=IDS)
def test_preset_predicts_the_record(rec):
    p, m = records.predict(rec), rec["measured"]
    pl = [r["bytes"] for r in p["activations_by_layer"]]
    ml = [r["bytes"] for r in m["activations_by_layer"]]
    assert [r["kind"] for r in p["activations_by_layer"]] == [r["kind"] for r in m["activations_by_layer"]]
    if "unexplained" in rec:  # the recorded difference, exactly: a change on either side is noticed
        u = rec["unexplained"]
        assert [a - b for a, b in zip(ml, pl)] == u["by_layer"]
        assert m["activations_outside_layers"] - p["activations_outside_layers"] == u["outside_layers"]
        assert u["by_layer"] != [0] * len(ml) or u["outside_layers"] != 0
    else:
        assert pl == ml
        assert p["activations_outside_layers"] == m["activations_outside_layers"]


# ---------------------------------------------------------------- independent transcription
def hf_layer_bytes(c, b, s, Ba=2, experts="loop"):
    """transformers 5.24 DeepseekV3 saved bytes per layer and outside, transcribed from
    modeling_deepseek_v3.py by reading it (each storage once), for bf16 (Ba 2) or fp32 (Ba 4),
    eager attention, the eager expert loop (``experts="loop"``) or the grouped_mm experts
    (``"grouped"``, :func:`hf_grouped_routed_bytes`), no recomputation, dropout 0.  A ``deepseek_v2``
    config runs modeling_deepseek_v2.py (AutoModelForCausalLM): its attention saves what V3's does (its
    complex RoPE multiply saves only the table: the FP32 complex q/k views need no saving for q's and k's
    gradient), its RoPE table is one complex64 freqs_cis, and its router is :func:`hf_router_bytes`'s."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    dcq, dc, dh, dhr, dv = c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], \
        c["v_head_dim"]
    k, hE, hF, V = c["num_experts_per_tok"], c["moe_intermediate_size"], c["intermediate_size"], c["vocab_size"]
    t = b * s
    fp32 = Ba == 4

    def rmsnorm(w):  # x.to(float32) [the input itself at fp32], rsqrt, pre-weight value
        return 4 * t * w + 4 * t + Ba * t * w
    # no query compression (q_lora_rank null): q_proj reads the input norm's output, no q latent or its norm
    nlat, dcq = (2, dcq) if dcq is not None else (1, 0)
    attn = (rmsnorm(h) + Ba * t * h                       # input norm; its output (q_a_proj/q_proj/kv_a_proj input)
            + 4 * t * (dcq + dc + (dhr if fp32 else 0)) + nlat * 4 * t + Ba * t * (dcq + dc)  # latent norms
            + Ba * t * (dcq + dc)                          # q_b_proj, kv_b_proj inputs
            + 2 * Ba * t * nh * (dh + dhr)                 # query, key
            + Ba * t * nh * (dv + (dh if b == 1 or nh == 1 else 0))  # value (b = 1 or 1 head: kv_b_proj's output)
            + 4 * b * nh * s * s + (0 if fp32 else Ba * b * nh * s * s)   # FP32 softmax, probabilities
            + Ba * t * nh * dv)                            # o_proj input
    ffn_norm = rmsnorm(h) + Ba * t * h
    dense = ffn_norm + 4 * Ba * t * hF
    router = hf_router_bytes(c, t, Ba)
    routed = t * k * (16 + 4 + 3 * Ba * h + 4 * Ba * hE) if experts == "loop" else hf_grouped_routed_bytes(c, b, s, Ba)
    shared = 4 * Ba * t * hE * c["n_shared_experts"]
    moe = ffn_norm + router + routed + shared
    # RoPE: V3's cos and sin (B_a each); V2's freqs_cis, s d_h^R / 2 complex64 (8 B), whatever B_a
    rope = 8 * s * (dhr // 2) if c.get("model_type") == "deepseek_v2" else 2 * Ba * s * dhr
    outside = (8 * t + rope + rmsnorm(h) + Ba * t * h + 4 * t * V + 8 * t + (8 if b == 1 else 0) + 4)
    return attn + dense, attn + moe, outside


def hf_router_bytes(c, t, Ba=2):
    """What transformers 5.24's router keeps for t tokens, transcribed by reading the code the config's
    model_type runs (each storage once).  Both: ``hidden_states.type(float32)`` (a copy unless Ba = 4; the
    weight is kept FP32 by from_config: no copy) saved by F.linear, the FP32 scores saved by their activation,
    topk's int64 indices; ``* routed_scaling_factor`` multiplies by a Python float (nothing saved).
    DeepseekV3TopkRouter (deepseek_v3): sigmoid, whatever scoring_func and topk_method say; the group-limited
    top-k bookkeeping (each group's top-2 and the kept groups' int64 indices, the bool mask) is saved by nodes
    whose outputs are discarded (only topk's indices are used; the weights are gathered from the scores):
    freed in the forward, at one group too; ``norm_topk_prob`` (DeepseekV3Config's default true): the in-place
    division keeps the FP32 normaliser and the gathered weights.  DeepseekV2TopkRouter (deepseek_v2):
    softmax(dtype=float32) keeps its result; ``greedy``: topk of the scores, its values the weights;
    ``group_limited_greedy``: the groups' max (its indices freed with the discarded group top-k) and
    masked_fill's bool mask, held; no norm_topk_prob in its code."""
    h, N, k = c["hidden_size"], c["n_routed_experts"], c["num_experts_per_tok"]
    common = (0 if Ba == 4 else 4 * t * h) + 4 * t * N + 8 * t * k
    if c.get("model_type") == "deepseek_v2":
        return common + (t * N if c.get("topk_method") == "group_limited_greedy" else 0)
    return common + (4 * t + 4 * t * k if c.get("norm_topk_prob", True) else 0)


def hf_grouped_routed_bytes(c, b, s, Ba=2):
    """What transformers 5.24's grouped_mm experts keep for backward (integrations/moe.py:
    grouped_mm_experts_forward, config._experts_implementation = "grouped_mm"), transcribed by reading it,
    each storage once, for S = b s k token-copies sorted by expert:
      hidden_states[perm // num_top_k]     index saves its int64 indices (S), a new tensor even at k = 1
      sample_weights[perm]                 index saves perm (int64, S)
      grouped_mm(selected, gate_up_proj)   saves its input (B_a S h) and the int32 offsets (N: cumsum of histc)
      act_fn(gate) * up                    silu saves gate, the multiply up: both views of the gate_up output
                                           (B_a S 2 h_E, one storage); the multiply also the silu output (B_a S h_E)
      grouped_mm(product, down_proj)       saves the product (B_a S h_E) and the same offsets
      proj_out * sample_weights_g[:, None] saves the down output (B_a S h) and the FP32 sorted weights (4 S)
      weighted_out[inv_perm]               index saves inv_perm (int64, S)
      view(...).sum(dim=1), .to(dtype)     save nothing (no index_add_ source, unlike the loop)
    torch.sort, histc and cumsum run on integers or without grad: nothing saved."""
    S = b * s * c["num_experts_per_tok"]
    h, hE, N = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    return S * (8 + 8 + 8 + 4) + S * (Ba * h + Ba * h) + S * (2 * Ba * hE + Ba * hE + Ba * hE) + 4 * N


def _cfg(path):
    with open(path) as f:
        return json.load(f)


def _scaled(tmp_path, h, nh, N, k, G, kG, **extra):
    """The tiny config at hidden size h, nh heads, N experts of which k per token, G groups keeping kG (the
    other widths follow h), written to ``tmp_path``: (the config, its path)."""
    c = dict(_cfg("tests/data/tiny/config.json"), hidden_size=h, num_attention_heads=nh, num_key_value_heads=nh,
             n_routed_experts=N, num_experts_per_tok=k, n_group=G, topk_group=kG, intermediate_size=3 * h,
             moe_intermediate_size=h // 2, q_lora_rank=h // 4 + 8, kv_lora_rank=h // 4, vocab_size=999, **extra)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(c))
    return c, path


@pytest.mark.parametrize("h,nh,N,k,G,kG,b,s,dtype", [
    (384, 6, 16, 3, 4, 2, 2, 128, "bf16"), (128, 2, 4, 1, 1, 1, 1, 64, "bf16"), (384, 6, 16, 3, 4, 2, 3, 96, "fp32"),
    (128, 1, 4, 1, 2, 1, 2, 64, "bf16"), (7168, 128, 256, 8, 8, 4, 1, 4096, "bf16")])
def test_preset_equals_the_transcription_at_other_dims(tmp_path, h, nh, N, k, G, kG, b, s, dtype):
    c, path = _scaled(tmp_path, h, nh, N, k, G, kG)
    import types
    from memsym.trace.compare import predicted
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none"),
                  "transformers")
    d, m, o = hf_layer_bytes(c, b, s, 4 if dtype == "fp32" else 2)
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    assert p["activations_outside_layers"] == o


@pytest.mark.parametrize("h,nh,N,k,G,kG,b,s,dtype", [
    (384, 6, 16, 3, 4, 2, 2, 128, "bf16"), (128, 2, 4, 1, 1, 1, 1, 64, "bf16"), (384, 6, 16, 3, 4, 2, 3, 96, "fp32"),
    (7168, 128, 256, 8, 8, 4, 1, 4096, "bf16")])
def test_grouped_experts_equal_the_transcription_at_other_dims(tmp_path, h, nh, N, k, G, kG, b, s, dtype):
    """A transformers trace run with --experts grouped is predicted with the transformers preset and
    --experts grouped (memsym/trace/compare.py), and that is the hand transcription of grouped_mm's tensors."""
    c, path = _scaled(tmp_path, h, nh, N, k, G, kG)
    import types
    from memsym.trace.compare import predicted
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none",
                                        framework="transformers", experts="grouped"), "transformers")
    Ba = 4 if dtype == "fp32" else 2
    d, m, o = hf_layer_bytes(c, b, s, Ba, experts="grouped")
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    assert p["activations_outside_layers"] == o
    fp32 = " --act-dtype fp32 --weight-dtype fp32"  # (the traced model is built in FP32: weights and activations)
    assert p["estimate"].endswith("--conventions transformers" + (fp32 if Ba == 4 else "") + " --experts grouped")
    # the loop differs by (B_a h - 8) bytes per token-copy and the 4 N bytes of offsets, nothing else
    dl, ml, ol = hf_layer_bytes(c, b, s, Ba)
    assert (dl, ol) == (d, o) and ml - m == b * s * k * (Ba * h - 8) - 4 * N


def test_grouped_records_are_exact_and_the_preset_stays_loop():
    """Both grouped_mm records (two configs, b and s) are predicted to the byte (test_preset_predicts_the_record),
    none unexplained; the trace's --experts maps to the switch only for the framework's own preset."""
    import types
    from derivations.config import CONVENTION_PRESETS
    from memsym.trace.compare import run_switches
    grouped = [r for r in RECORDS if r["settings"]["experts"] == "grouped"]
    assert len({(r["config"]["path"], r["settings"]["mbs"], r["settings"]["seq"]) for r in grouped}) >= 2
    assert all("unexplained" not in r for r in grouped)
    assert CONVENTION_PRESETS["transformers"]["experts"] == "loop"
    args = types.SimpleNamespace(framework="transformers", experts="grouped")
    assert run_switches(args, "transformers") == [("experts", "grouped")] and run_switches(args, "paper") == []
    assert run_switches(types.SimpleNamespace(framework="transformers", experts="loop"), "transformers") == []


def test_grouped_offsets_are_per_local_expert_not_per_token(capsys):
    """--experts grouped at EP 2 against loop: per token-copy the device holds ((b s N_r/EP) under the paper's
    count, b s N_r under --routed-tokens dispatch at SP 1) 28 bytes instead of 20 + B_a h, and the int32
    offsets of its N/EP local experts, 4 N/EP bytes, which the dispatch count does not multiply."""
    c = _cfg("tests/data/tiny/config.json")
    h, N, k, b, s = c["hidden_size"], c["n_routed_experts"], c["num_experts_per_tok"], 2, 64

    def moe(*extra):
        assert main(["estimate", "--model", "tests/data/tiny/config.json", "--dp", "2", "--tp", "1", "--pp", "1",
                     "--ep", "2", "--etp", "1", "--mbs", str(b), "--seq", str(s), "--conventions", "transformers",
                     "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["bytes"]["activations_by_layer"][-1]["bytes"]
    for extra, copies in (((), b * s * k // 2), (("--routed-tokens", "dispatch"), b * s * k)):
        loop, grouped = moe(*extra), moe("--experts", "grouped", *extra)
        assert loop - grouped == copies * (2 * h + 20 - 28) - 4 * N // 2


def mcore_layer_bytes(c, b, s, Ba=2, swiglu="fused", router_dtype="fp32", aux_loss="seq"):
    """Megatron-Core 0.16.1 saved bytes per layer and outside (local spec, TP = 1, dropout 0, the config's
    routing (:func:`mcore_router_bytes`), all-to-all dispatcher, SequentialMLP), transcribed by reading
    multi_latent_attention.py, dot_product_attention.py, fused_softmax.py, rope_utils.py, mlp.py,
    fused_bias_swiglu.py, router.py, moe_utils.py and cross_entropy.py with torch.rms_norm's CPU composite
    (each storage once); by default with the DeepSeek recipes' settings (fused SwiGLU, FP32 router,
    seq_aux_loss), else as given (unfused, activation, none / global)."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    dcq, dc, dh, dhr, dv = c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], \
        c["v_head_dim"]
    N, k, hE, hF, V = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], \
        c["intermediate_size"], c["vocab_size"]
    t, fp32 = b * s, Ba == 4

    def rmsnorm(w):  # FP32 input copy (the input at fp32), FP32 rsqrt, FP32 pre-weight value
        return 4 * t * w + 4 * t + 4 * t * w
    nlat, dcq = (2, dcq) if dcq is not None else (1, 0)              # q_lora_rank null: linear_q_proj, no q norm
    attn = (rmsnorm(h) + Ba * t * h                                  # input norm, its output (down projections)
            + 4 * t * (dcq + dc + (dhr if fp32 else 0)) + nlat * 4 * t + 4 * t * (dcq + dc)  # q/kv layernorms
            + Ba * t * (dcq + dc)                                     # up-projection inputs
            + 4 * Ba * s * dhr                                        # cos, sin for q and k
            + 2 * Ba * t * nh * (dh + dhr)                            # query, key (baddbmm)
            + s * s                                                   # bool causal mask
            + 4 * b * nh * s * s + (0 if fp32 else Ba * b * nh * s * s)  # FP32 softmax, B_a probabilities
            + 2 * Ba * t * nh * dv)                                   # value (bmm), linear_proj input
    ffn_norm = rmsnorm(h) + Ba * t * h
    # unfused glu: fc1 out (2), silu, x_linear + 0, product (fc2's input); fused (BiasSwiGLUFunction): fc1 out
    # (2) and fc2's input
    glu = 5 if swiglu == "unfused" else 3
    dense = ffn_norm + glu * Ba * t * hF
    R = 4 if router_dtype == "fp32" else Ba                           # the router's logits and probabilities
    router = mcore_router_bytes(c, t, b, Ba, R, aux_loss)
    dispatch = t * N + R * t * N + 8 * t * k
    # per token-copy: its input, its probability (R); unfused: fc1 (2), silu, +0, glu, x p; fused
    # (WeightedSwiGLUFunction keeps its input and the probabilities): fc1 (2), fc2's input
    routed = t * k * (Ba * h + R + (6 if swiglu == "unfused" else 3) * Ba * hE)
    shared = glu * Ba * t * hE * c["n_shared_experts"]
    moe = ffn_norm + router + dispatch + routed + shared
    outside = 8 * t + rmsnorm(h) + Ba * t * h + 4 * t * V + 9 * t     # ids, final norm, head input, CE
    return attn + dense, attn + moe, outside


def mcore_router_bytes(c, t, b, Ba=2, R=4, aux_loss="seq"):
    """What Megatron-Core 0.16.1's TopKRouter keeps for t tokens (router.py, moe_utils.py:
    topk_routing_with_score_function, group_limited_topk, compute_routing_scores_for_aux_loss,
    switch_load_balancing_loss_func), R the router dtype's bytes, transcribed by reading them with the router
    Megatron-Bridge's DeepSeek bridges configure from the config: score function scoring_func (default softmax
    for deepseek_v2, sigmoid else), moe_router_pre_softmax True, the expert bias for noaux_tc (topk_method's
    default: greedy for deepseek_v2), the group-limited top-k when the transformers config has a topk_group
    (the config's, or DeepseekV3Config's default 4; DeepseekV2Config has none).
      sigmoid: sigmoid(logits.float()) keeps its FP32 output; with the bias the top-k runs on the biased
        scores and only its indices are used (group_limited_topk's bookkeeping freed), and gather keeps the
        scores cast to the logits' dtype (none when they are FP32); without the bias the top-k values are the
        scores: masked_fill's bool mask is held (group top-k indices freed); scores / (sum + 1e-20) keeps the
        top-k scores and the normaliser, only when k > 1.
      softmax (pre-softmax): softmax(dtype=float32) keeps its FP32 output; the top-k of its cast is the
        probabilities: masked_fill's bool mask (groups), the indices; nothing normalised.
    The top-k's int64 indices (topk, scatter) either way; ``* scaling_factor`` by a Python float (nothing).
    Load-balancing loss: the scores again (sigmoid in the router dtype with its normaliser; softmax FP32), the
    int64 tokens per sequence and expert and the loss scalar (the scores' dtype) for seq, the FP32 averaged
    tokens per expert and loss for global."""
    N, k = c["n_routed_experts"], c["num_experts_per_tok"]
    v2 = c.get("model_type") == "deepseek_v2"
    sigmoid = c.get("scoring_func", "softmax" if v2 else "sigmoid") == "sigmoid"
    bias = c.get("topk_method", "greedy" if v2 else "noaux_tc") == "noaux_tc"
    grouped = c.get("topk_group", None if v2 else 4) is not None
    if sigmoid:
        router = (4 * t * N + (Ba * t * N if bias and R != 4 else 0) + (t * N if grouped and not bias else 0)
                  + 8 * t * k + (R * t * (k + 1) if k > 1 else 0))
    else:
        router = 4 * t * N + (t * N if grouped else 0) + 8 * t * k
    if aux_loss != "none":
        S = R if sigmoid else 4
        router += S * t * N + (R * t if sigmoid else 0) + (8 * b * N + S if aux_loss == "seq" else 4 * N + 4)
    return router


@pytest.mark.parametrize("h,nh,N,k,G,kG,b,s,dtype", [
    (384, 6, 16, 3, 4, 2, 2, 128, "bf16"), (128, 2, 4, 1, 1, 1, 1, 64, "bf16"), (384, 6, 16, 4, 4, 2, 3, 96, "fp32"),
    (128, 1, 6, 1, 3, 2, 2, 64, "fp32"), (7168, 128, 256, 8, 8, 4, 1, 4096, "bf16")])
def test_mcore_preset_equals_the_transcription_at_other_dims(tmp_path, h, nh, N, k, G, kG, b, s, dtype):
    c, path = _scaled(tmp_path, h, nh, N, k, G, kG)
    import types
    from memsym.trace.compare import predicted
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none",
                                        framework="mcore"), "mcore")
    d, m, o = mcore_layer_bytes(c, b, s, 4 if dtype == "fp32" else 2)
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    assert p["activations_outside_layers"] == o


#: Routing variants of the tiny config (what a config says, as each framework reads it): V3-style configs that
#: turn the normalisation off, score with a softmax or drop the expert bias (with groups or one group), and
#: V2-style configs (model_type deepseek_v2: DeepSeek-V2's field values) with greedy, greedy without groups,
#: group-limited greedy, and a sigmoid.
V2 = dict(model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"], scoring_func="softmax",
          norm_topk_prob=False, routed_scaling_factor=16.0)
ROUTING = {
    "v3-no-norm": dict(norm_topk_prob=False),
    "v3-softmax-greedy": dict(scoring_func="softmax", topk_method="greedy"),
    "v3-sigmoid-greedy-groups": dict(topk_method="greedy", n_group=4, topk_group=2),
    "v3-sigmoid-greedy-one-group": dict(topk_method="greedy", n_group=1, topk_group=1),
    "v2-greedy-one-group": dict(V2, topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0),
    "v2-greedy": dict(V2, topk_method="greedy", n_group=None, topk_group=None),
    "v2-group-limited": dict(V2, topk_method="group_limited_greedy", n_group=4, topk_group=2),
    "v2-sigmoid-greedy": dict(V2, scoring_func="sigmoid", topk_method="greedy", n_group=None, topk_group=None),
}


def _routing_config(tmp_path, variant, **dims):
    c = dict(_cfg("tests/data/tiny/config.json"), **dims)
    c.update(ROUTING[variant])
    c = {key: x for key, x in c.items() if x is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(c))
    return c, path


@pytest.mark.parametrize("variant", list(ROUTING))
@pytest.mark.parametrize("k,b,s,dtype,router_dtype,aux_loss", [
    (3, 2, 128, "bf16", "fp32", "seq"), (4, 1, 64, "bf16", "activation", "global"), (1, 3, 96, "fp32", "activation",
                                                                                     "seq"),
    (2, 2, 64, "bf16", "activation", "none")])
def test_routing_variants_equal_the_transcription(tmp_path, variant, k, b, s, dtype, router_dtype, aux_loss):
    """Each routing variant, in both frameworks' presets, is the hand transcription of the router the
    framework's code runs for that config (hf_router_bytes, mcore_router_bytes), at other dims."""
    import types
    from memsym.trace.compare import predicted
    h = 384
    c, path = _routing_config(tmp_path, variant, hidden_size=h, num_attention_heads=6, num_key_value_heads=6,
                              n_routed_experts=16, num_experts_per_tok=k, intermediate_size=3 * h,
                              moe_intermediate_size=h // 2, q_lora_rank=h // 4 + 8, kv_lora_rank=h // 4, vocab_size=999)
    Ba = 4 if dtype == "fp32" else 2
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none",
                                        framework="transformers"), "transformers")
    d, m, o = hf_layer_bytes(c, b, s, Ba)
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    assert p["activations_outside_layers"] == o
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none",
                                        framework="mcore", router_dtype=router_dtype, aux_loss=aux_loss), "mcore")
    d, m, o = mcore_layer_bytes(c, b, s, Ba, router_dtype=router_dtype, aux_loss=aux_loss)
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    assert p["activations_outside_layers"] == o


V2_RECORDS = [r for r in RECORDS if "/tiny-v2" in r["config"]["path"]]


@pytest.mark.parametrize("rec", V2_RECORDS, ids=[r["_file"] for r in V2_RECORDS])
def test_v2_records_are_the_transcription(rec):
    """The DeepSeek-V2-style records (tests/data/tiny-v2*: softmax scores, greedy or group-limited greedy, no
    expert bias, in both frameworks) measured what the transcriptions of the code read."""
    c, st, m = _cfg(rec["config"]["path"]), rec["settings"], rec["measured"]
    b, s, Ba = st["mbs"], st["seq"], 4 if st["act_dtype"] == "fp32" else 2
    assert c["model_type"] == "deepseek_v2" and st["recompute"] == "none"
    if rec["framework"] == "mcore":
        d, mo, o = mcore_layer_bytes(c, b, s, Ba, st["swiglu"], st["router_dtype"], st["aux_loss"])
    else:
        d, mo, o = hf_layer_bytes(c, b, s, Ba, st["experts"])
    assert [r["bytes"] for r in m["activations_by_layer"]] == [d, mo, mo]
    assert m["activations_outside_layers"] == o


def test_v2_records_cover_both_frameworks_and_both_top_k_methods():
    assert {r["framework"] for r in V2_RECORDS} == {"transformers", "mcore"}
    assert {_cfg(r["config"]["path"])["topk_method"] for r in V2_RECORDS} == {"greedy", "group_limited_greedy"}
    assert all("unexplained" not in r for r in V2_RECORDS)


def test_routing_the_frameworks_ignore():
    """What each framework's code does not read changes nothing it keeps: transformers' DeepSeek-V3 code
    neither scoring_func nor topk_method nor the groups (sigmoid; the group bookkeeping freed), its DeepSeek-V2
    code no norm_topk_prob; Megatron-Core no norm_topk_prob (it normalises the sigmoid top-k when k > 1, never
    the pre-softmax one); neither the routed scaling factor (a multiply by a Python number)."""
    base = _cfg("tests/data/tiny/config.json")
    v2 = dict(base, **ROUTING["v2-group-limited"])
    t, b = 256, 2
    assert hf_router_bytes(dict(base, scoring_func="softmax", topk_method="greedy", n_group=4, topk_group=2), t) \
        == hf_router_bytes(base, t)
    assert hf_router_bytes(dict(v2, norm_topk_prob=True), t) == hf_router_bytes(v2, t)
    for c in (base, v2):
        assert mcore_router_bytes(dict(c, norm_topk_prob=not c.get("norm_topk_prob", True)), t, b) == \
            mcore_router_bytes(c, t, b)
    # and the presets agree: the indicators the config's fields set are the only ones these tensors read
    from derivations.config.hfconfig import from_dict
    assert from_dict(dict(base, routed_scaling_factor=1.0)).named() == from_dict(base).named()


def test_mcore_records_cover_none_full_and_three_selective_sets_at_two_configs():
    mc = [r for r in RECORDS if r["framework"] == "mcore"]
    rc = {r["settings"]["recompute"] for r in mc}
    assert {"none", "full"} <= rc and len({x for x in rc if x == "selective" or x.startswith("custom:")}) >= 3
    assert len({r["config"]["path"] for r in mc}) >= 2 and {1, 2} <= {r["settings"]["mbs"] for r in mc}
    assert all("unexplained" not in r for r in mc)


def test_mcore_te_kernels_change_what_the_docs_say(capsys):
    """--kernels te: TE's fused attention keeps no s^2 tensor (softmax statistics instead), its fused
    RMSNorm keeps the input and an FP32 rsigma; at the tiny config the difference is that arithmetic."""
    out = {}
    for kern in ("local", "te"):
        assert main(["estimate", "--model", "tests/data/tiny/config.json", "--conventions", "mcore", "--kernels", kern,
                     "--dp", "1", "--tp", "1", "--pp", "1", "--ep", "1", "--etp", "1", "--mbs", "1", "--seq", "64",
                     "--json"]) == 0
        out[kern] = json.loads(capsys.readouterr().out)["bytes"]
    c = _cfg("tests/data/tiny/config.json")
    h, nh, dcq, dc, dhr, s_ = c["hidden_size"], c["num_attention_heads"], c["q_lora_rank"], \
        c["kv_lora_rank"], c["qk_rope_head_dim"], 64
    t, Ba = s_, 2
    local_attn = (2 * (4 * t * h) + 4 * t) + (2 * 4 * t * (dcq + dc) + 8 * t) + 4 * Ba * s_ * dhr + s_ * s_ \
        + 4 * nh * s_ * s_ + Ba * nh * s_ * s_
    te_attn = (Ba * t * h + 4 * t) + (Ba * t * (dcq + dc) + 8 * t) + 4 * nh * s_  # output: W^O input, as local
    local_ffn = 2 * (4 * t * h) + 4 * t + 1 * Ba * t * c["intermediate_size"]  # SwiGLU fused under both
    te_ffn = Ba * t * h + 4 * t + 1 * Ba * t * c["intermediate_size"]
    d_local, d_te = out["local"]["activations_by_layer"][0]["bytes"], out["te"]["activations_by_layer"][0]["bytes"]
    assert d_local - d_te == (local_attn - te_attn) + (local_ffn - te_ffn)


# ---------------------------------------------------------------- estimate --json per layer
@pytest.mark.parametrize("preset", ["paper", "megatron", "modelzoo", "transformers", "mcore"])
def test_by_layer_sums_to_the_microbatch(capsys, preset):
    assert main(["estimate", "--conventions", preset, "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["bytes"]
    assert b["activations_by_layer"] and all(r["kind"] in ("dense", "moe") for r in b["activations_by_layer"])
    assert sum(r["bytes"] for r in b["activations_by_layer"]) + b["activations_outside_layers"] == \
        b["activations_per_microbatch"]


def test_paper_by_layer_is_the_papers_layer(capsys):
    assert main(["estimate", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["bytes"]
    assert [r["bytes"] for r in b["activations_by_layer"]] == [b["activations_per_layer"]] * 4
    assert b["activations_outside_layers"] == 0


def test_trace_without_the_extra_exits_2_naming_it(capsys, monkeypatch):
    import memsym.trace as tr
    monkeypatch.setattr(tr, "missing", lambda fw="transformers": "torch")
    assert main(["trace", "--model", "tests/data/tiny/config.json"]) == 2
    assert "pip install 'memsym[trace]'" in capsys.readouterr().err


# ---------------------------------------------------------------- slow: re-trace (torch)
def _have_torch():
    from memsym.trace import missing
    return missing("transformers") is None


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
@pytest.mark.parametrize("rec", RECORDS, ids=IDS)
def test_retrace_matches_the_record(rec):
    out = records.retrace(rec, step=False)  # a step record's profiled step: tests/test_step_traces.py
    assert out["measured"]["activations_by_layer"] == rec["measured"]["activations_by_layer"]
    assert out["measured"]["activations_outside_layers"] == rec["measured"]["activations_outside_layers"]
    if rec["settings"].get("fake"):  # FakeTensorMode (memsym/trace/fake.py): forward only
        assert out["trains"] == {"loss": None, "params_with_grad": 0} and out["settings"]["fake"] is True
    else:
        assert out["trains"]["params_with_grad"] > 0


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
@pytest.mark.parametrize("experts", ["loop", "grouped"])
def test_trace_of_a_generated_config_is_predicted(tmp_path, experts):
    c = dict(_cfg("tests/data/tiny/config.json"), hidden_size=192, num_attention_heads=3, num_key_value_heads=3,
             n_routed_experts=12, num_experts_per_tok=3, n_group=4, topk_group=2, intermediate_size=320,
             moe_intermediate_size=96, q_lora_rank=80, kv_lora_rank=48, vocab_size=777)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(c))
    import types
    from memsym.trace import hf
    from memsym.trace.compare import result
    st = dict(mbs=3, seq=96, act_dtype="bf16", attention="eager", experts=experts, recompute="none")
    rec, info = hf.run(str(path), **st)
    out = result(types.SimpleNamespace(framework="transformers", conventions=None, tensors=False, model=str(path),
                                       **st), rec, info)
    assert out["measured"]["activations_by_layer"] == out["predicted"]["activations_by_layer"]
    assert out["measured"]["activations_outside_layers"] == out["predicted"]["activations_outside_layers"]
    d, m, o = hf_layer_bytes(c, 3, 96, experts=experts)
    assert [r["bytes"] for r in out["measured"]["activations_by_layer"]] == [d, m, m]
    assert out["measured"]["activations_outside_layers"] == o


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_transformers_default_experts_implementation_is_grouped_mm():
    """What the README and --experts' help say: a DeepseekV3 model built from a config that names no
    experts_implementation runs grouped_mm (modeling_utils.py: PreTrainedModel.get_correct_experts_implementation),
    so transformers' default is --experts grouped; the transformers preset models the eager loop."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    raw = _cfg("tests/data/tiny/config.json")
    conf = DeepseekV3Config(**{k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype")})
    assert conf._experts_implementation is None
    assert DeepseekV3ForCausalLM(conf).config._experts_implementation == "grouped_mm"


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_mcore_trace_of_a_generated_config_is_predicted(tmp_path):
    c = dict(_cfg("tests/data/tiny/config.json"), hidden_size=192, num_attention_heads=3, num_key_value_heads=3,
             n_routed_experts=12, num_experts_per_tok=4, n_group=4, topk_group=2, intermediate_size=320,
             moe_intermediate_size=96, q_lora_rank=80, kv_lora_rank=48, vocab_size=777)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(c))
    import types
    from memsym.trace import mcore
    from memsym.trace.compare import result
    st = dict(mbs=3, seq=96, act_dtype="bf16", attention="eager", experts="loop", recompute="none")
    rec, info = mcore.run(str(path), **st)
    out = result(types.SimpleNamespace(framework="mcore", conventions=None, tensors=False, model=str(path),
                                       **st), rec, info)
    assert out["measured"]["activations_by_layer"] == out["predicted"]["activations_by_layer"]
    assert out["measured"]["activations_outside_layers"] == out["predicted"]["activations_outside_layers"]
    d, m, o = mcore_layer_bytes(c, 3, 96)
    assert [r["bytes"] for r in out["measured"]["activations_by_layer"]] == [d, m, m]
    assert out["measured"]["activations_outside_layers"] == o


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
@pytest.mark.parametrize("framework,variant", [
    ("transformers", "v3-no-norm"), ("transformers", "v2-greedy"), ("transformers", "v2-group-limited"),
    ("mcore", "v3-softmax-greedy"), ("mcore", "v3-sigmoid-greedy-groups"), ("mcore", "v2-greedy-one-group"),
    ("mcore", "v2-greedy"), ("mcore", "v2-sigmoid-greedy")])
def test_trace_of_a_routing_variant_is_predicted(tmp_path, framework, variant):
    """A generated config of each routing variant, traced: measured == the preset == the transcription, per
    layer and outside (the code each framework runs for the config: memsym/trace/hf.py, mcore.py)."""
    h = 192
    c, path = _routing_config(tmp_path, variant, hidden_size=h, num_attention_heads=3, num_key_value_heads=3,
                              n_routed_experts=12, num_experts_per_tok=3, intermediate_size=320,
                              moe_intermediate_size=96, q_lora_rank=80, kv_lora_rank=48, vocab_size=777)
    import types
    from memsym.trace import hf, mcore
    from memsym.trace.compare import result
    st = dict(mbs=2, seq=96, act_dtype="bf16", attention="eager", experts="loop", recompute="none")
    settings = {"router_dtype": "activation"} if framework == "mcore" else {}
    rec, info = (mcore if framework == "mcore" else hf).run(str(path), settings=settings or None, **st)
    out = result(types.SimpleNamespace(framework=framework, conventions=None, tensors=False, model=str(path),
                                       **settings, **st), rec, info)
    assert out["measured"]["activations_by_layer"] == out["predicted"]["activations_by_layer"]
    assert out["measured"]["activations_outside_layers"] == out["predicted"]["activations_outside_layers"]
    d, m, o = (mcore_layer_bytes(c, 2, 96, router_dtype="activation") if framework == "mcore"
               else hf_layer_bytes(c, 2, 96))
    assert [r["bytes"] for r in out["measured"]["activations_by_layer"]] == [d, m, m]
    assert out["measured"]["activations_outside_layers"] == o


def mcore_mtp_bytes(c, b, s, moe_layer, Ba=2):
    """What one Megatron-Core 0.16.1 MTP module adds to a micro-batch (local spec, TP = 1), transcribed by
    reading transformer/multi_token_prediction.py (MultiTokenPredictionLayer) and models/gpt/gpt_model.py
    (_postprocess): the rolled input ids (8 B a token, the embedding's backward); enorm, hnorm and the
    module's final_layernorm (torch RMSNorm: FP32 input copy, rsqrt, pre-weight value); eh_proj's input,
    the concatenated [e, h] (2h); one transformer layer of the decoder's last spec (``moe_layer``); the
    output layer's input, now the torch.cat of the main and MTP hidden states (h more); its vocab-parallel
    cross-entropy (FP32 softmax, 9 B a token); ``loss_mask * mtp_loss`` (the int64 ones_like(labels) mask),
    ``/ num_tokens`` (an int64 scalar) and MTPLossAutoScaler (the FP32 per-token loss)."""
    h, V, t = c["hidden_size"], c["vocab_size"], b * s
    norm = 4 * t * h + 4 * t + 4 * t * h
    return (8 * t + 3 * norm + Ba * t * 2 * h + moe_layer + Ba * t * h + 4 * t * V + 9 * t
            + 8 * t + 8 + 4 * t)


@pytest.mark.parametrize("h,nh,N,k,D,b,s,dtype", [
    (384, 6, 16, 3, 1, 2, 128, "bf16"), (128, 2, 4, 1, 2, 1, 64, "bf16"), (384, 6, 16, 4, 1, 3, 96, "fp32")])
def test_mcore_preset_predicts_the_mtp_modules_as_transcribed(tmp_path, h, nh, N, k, D, b, s, dtype):
    """--mtp-activations last-stage under the mcore preset: the decoder's layers unchanged, and D times
    the transcription of one MTP module (mcore_mtp_bytes) outside them."""
    c, path = _scaled(tmp_path, h, nh, N, k, 1, 1, num_nextn_predict_layers=D)
    import types
    from memsym.trace.compare import predicted
    p = predicted(types.SimpleNamespace(model=str(path), mbs=b, seq=s, act_dtype=dtype, recompute="none",
                                        framework="mcore"), "mcore")
    Ba = 4 if dtype == "fp32" else 2
    d, m, o = mcore_layer_bytes(c, b, s, Ba)
    assert [r["bytes"] for r in p["activations_by_layer"]] == [d, m, m]
    # D modules: each its own ids, norms, eh_proj input, layer, head-input share, CE and loss state
    assert p["activations_outside_layers"] == o + D * mcore_mtp_bytes(c, b, s, m, Ba)
    assert "--mtp-activations last-stage" in p["estimate"]


def test_mtp_activations_are_the_last_stage_only_and_off_by_default(capsys):
    """The switch adds to the last stage only (e_H D rows), and nothing unless asked: the paper and
    every preset train no MTP module by default."""
    def act(stage, *extra):
        assert main(["estimate", "--conventions", "mcore", "--stage", str(stage), "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["bytes"]
    for stage in (0, 1):
        assert act(stage, "--mtp-activations", "last-stage") == act(stage)
    on, off = act(15, "--mtp-activations", "last-stage"), act(15)
    assert on["activations_by_layer"] == off["activations_by_layer"]
    # one MTP module of DeepSeek-V3 (D = 1) is more than one MoE layer of the stage (its layer + its own loss)
    extra = on["activations_outside_layers"] - off["activations_outside_layers"]
    assert extra > off["activations_by_layer"][-1]["bytes"]
    assert on["activations"] - off["activations"] == extra


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_mcore_trace_attributes_the_mtp_module_outside_the_layers(tmp_path):
    """The MTP block (``mtp.layers.0.transformer_layer...``) is not decoder layer 0: the decoder's layers
    stay exactly the transcription, and everything the MTP module saves counts outside the layers."""
    c = dict(_cfg("tests/data/tiny/config.json"), hidden_size=192, num_attention_heads=3, num_key_value_heads=3,
             n_routed_experts=12, num_experts_per_tok=4, n_group=4, topk_group=2, intermediate_size=320,
             moe_intermediate_size=96, q_lora_rank=80, kv_lora_rank=48, vocab_size=777, num_nextn_predict_layers=1)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(c))
    import types
    from memsym.trace import mcore
    from memsym.trace.compare import result
    st = dict(mbs=2, seq=64, act_dtype="bf16", attention="eager", experts="loop", recompute="none")
    rec, info = mcore.run(str(path), **st)
    out = result(types.SimpleNamespace(framework="mcore", conventions=None, tensors=False, model=str(path),
                                       **st), rec, info)
    d, m, o = mcore_layer_bytes(c, 2, 64)
    assert [r["bytes"] for r in out["measured"]["activations_by_layer"]] == [d, m, m]
    assert out["measured"]["activations_outside_layers"] == o + mcore_mtp_bytes(c, 2, 64, m)
    assert {r.sublayer for r in rec.saved.values() if r.module.startswith("mtp.")} == {"mtp"}

def test_ce_backward_transient_record_is_the_cast():
    """paper/transients/ce-backward.toml (measured on CPU): the peak above the held bytes in Megatron-Core's
    cross-entropy backward is the B_a b s v cast that --ce-backward cast counts, plus at most 12 b s + 8
    bytes of per-token FP32 scalars; the forward's upcast holds as much (plus 16 b s)."""
    import tomllib
    rec = tomllib.loads((ROOT / "paper" / "transients" / "ce-backward.toml").read_text())
    sh = rec["shape"]
    b_, s_, v_ = sh["b"], sh["s"], sh["v"]
    from derivations.tensors import head_specs
    part = next(p for p in head_specs() if p.key == "loss_grad")
    vals = dict(B_a=2, b=b_, s=s_, v=v_, TP=1, CP=1)
    cast = int(part.expr.xreplace({x: vals[x.name] for x in part.expr.free_symbols}))
    assert cast == 2 * b_ * s_ * v_
    for path, m in rec["measured"].items():
        assert 0 <= m["backward_peak_above"] - cast <= 12 * b_ * s_ + 8, path
        assert 0 <= m["forward_peak_above"] - cast <= 16 * b_ * s_, path
        assert m["held_after_forward"] >= 4 * b_ * s_ * v_      # the FP32 softmax is held


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_ce_backward_transient_remeasures_as_recorded():
    import tomllib
    from memsym.trace import transients
    rec = tomllib.loads((ROOT / "paper" / "transients" / "ce-backward.toml").read_text())
    assert tomllib.loads(transients.record()) == rec


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the slow tests must run, not skip
    assert _have_torch(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"
