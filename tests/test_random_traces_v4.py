"""Random DeepSeek-V4 configurations traced in transformers (models/deepseek_v4) and predicted to the byte by the
DeepSeek-V4 family's terms (derivations/families/deepseek_v4/activations.py), per layer and outside the layers:
the random-configuration test of tests/test_random_traces.py (its tracing and comparison, its seed) for V4.

What the strategy draws (:func:`configs`): hidden size 32-256; heads 1-8 of head_dim 8-64 with 2-16 (even) rotary
dims (qk_rope_head_dim, DeepseekV4Config's legacy field); q_lora_rank 8-96; o_groups dividing n_h x head_dim (1-4)
of rank 4-48; 2-9 routed experts of 8-128, top-k 1-4; hc_mult 1-4 with 1-4 Sinkhorn iterations; sliding window
4-64; CSA and HCA compression rates 2-8 and 8-32; an indexer of 1-4 heads of the rotary dims plus 0-16, top-k
1-64; 2-5 layers, each of a random attention type and a random MoE type (hash or learned router); the experts'
width as moe_intermediate_size or, half the draws, as its alias intermediate_size (which then wins); scoring
sqrtsoftplus or sigmoid; vocabulary 64-1024, tied or not.  Training: micro-batch 1-2, sequence 8-256 (below a
compression rate too: no entry), BF16 or FP32, recomputation none or full, experts loop or grouped (h and the
experts' width then multiples of 8: torch._grouped_mm's 16-byte strides).  Megatron-Core has no DeepSeek-V4
model: transformers only."""
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from test_random_traces import DRAWS, SEED, _have_trace, check_draw

TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")


@st.composite
def configs(draw):
    """(config.json fields, training settings) of one small DeepSeek-V4 model (module docstring)."""
    grouped = draw(st.booleans())
    mult = 8 if grouped else 1
    nh, d_r = draw(st.integers(1, 8)), 2 * draw(st.integers(1, 8))
    # DeepseekV4Config folds qk_rope_head_dim as int(head_dim * (r / head_dim)): a head_dim where that is r
    d = draw(st.sampled_from([x for x in range(max(8, d_r), 65) if int(x * (d_r / x)) == d_r]))
    groups = [g for g in (1, 2, 3, 4) if (nh * d) % g == 0]
    N = draw(st.integers(2, 9))
    layers = draw(st.integers(2, 5))
    c = dict(model_type="deepseek_v4", hidden_size=draw(st.integers(-(-32 // mult), 256 // mult)) * mult,
             num_attention_heads=nh, num_key_value_heads=1, head_dim=d, qk_rope_head_dim=d_r,
             q_lora_rank=draw(st.integers(8, 96)), o_groups=draw(st.sampled_from(groups)),
             o_lora_rank=draw(st.integers(4, 48)), n_routed_experts=N,
             num_experts_per_tok=draw(st.integers(1, min(4, N))),
             moe_intermediate_size=draw(st.integers(-(-8 // mult), 128 // mult)) * mult, n_shared_experts=1,
             hc_mult=draw(st.integers(1, 4)), hc_sinkhorn_iters=draw(st.integers(1, 4)),
             sliding_window=draw(st.integers(4, 64)),
             compress_rates={"compressed_sparse_attention": draw(st.integers(2, 8)),
                             "heavily_compressed_attention": draw(st.integers(8, 32))},
             index_n_heads=draw(st.integers(1, 4)), index_head_dim=d_r + 2 * draw(st.integers(0, 8)),
             index_topk=draw(st.integers(1, 64)), num_hidden_layers=layers,
             layer_types=[draw(st.sampled_from(TYPES)) for _ in range(layers)],
             mlp_layer_types=[draw(st.sampled_from(["hash_moe", "moe"])) for _ in range(layers)],
             scoring_func=draw(st.sampled_from(["sqrtsoftplus", "sigmoid"])),
             vocab_size=draw(st.integers(64, 1024)), tie_word_embeddings=draw(st.booleans()))
    if draw(st.booleans()):  # DeepseekV4Config.attribute_map: intermediate_size sets moe_intermediate_size
        c["intermediate_size"] = draw(st.integers(-(-8 // mult), 128 // mult)) * mult
    training = {"transformers": dict(mbs=draw(st.integers(1, 2)), seq=draw(st.integers(8, 256)),
                                     act_dtype=draw(st.sampled_from(["bf16", "fp32"])), attention="eager",
                                     experts="grouped" if grouped else "loop",
                                     recompute=draw(st.sampled_from(["none", "full"])))}
    return c, training


@pytest.mark.trace
@pytest.mark.skipif(not _have_trace(), reason="needs pip install 'memsym[trace]'")
@seed(SEED)
@DRAWS
@given(draw=configs())
def test_random_v4_config_is_predicted(draw, record_property):
    """Every draw, traced in transformers: measured == predicted per layer and outside."""
    record_property("random_seed", SEED)
    check_draw(*draw)


def test_the_v4_strategy_draws_valid_configs():
    """Every draw is a config memsym reads within the trace's limits (no torch needed)."""
    from memsym.trace import inputs

    @seed(SEED)
    @settings(max_examples=200, deadline=None, database=None)
    @given(draw=configs())
    def check(draw):
        c, training = draw
        _, spec = inputs.of(c)
        assert spec.family == "deepseek_v4" and spec.d_hr == c["qk_rope_head_dim"]
        assert spec.h_E == c.get("intermediate_size", c["moe_intermediate_size"])
        assert [a for a in spec.attention] == [{"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
                                                "heavy_compressed_attention": "hca"}.get(x, "hca")
                                               for x in c["layer_types"]]
        t = training["transformers"]
        inputs.check_size(spec, t["mbs"], t["seq"])
        inputs.check_routing("transformers", spec)
        inputs.check_options("transformers", t["attention"], t["experts"], t["recompute"], t.get("settings"))

    check()
