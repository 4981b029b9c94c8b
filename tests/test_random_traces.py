"""Random DeepSeek-family configurations traced in both frameworks and predicted to the byte (issue 26 item 5).

A hypothesis strategy draws a small config.json and the training settings; each draw is traced in
transformers (``DeepseekV3ForCausalLM``, or ``DeepseekV2ForCausalLM`` for a ``deepseek_v2`` draw) and in
Megatron-Core (``GPTModel``, local spec, the router as memsym/trace/mcore.py ``routing_fields`` maps the
config) on CPU (memsym/trace/hf.py, mcore.py) and compared with the framework's preset
(memsym/trace/compare.py: ``result``) per layer and outside the layers: measured == predicted, every byte.

The seed is fresh each run (printed in the summary and in a failure) unless ``MEMSYM_RANDOM_SEED`` gives
it; ``MEMSYM_RANDOM_EXAMPLES`` sets the draws (default :data:`EXAMPLES`).  A failing draw prints its
config.json and the ``memsym trace`` commands that re-measure it (add ``--record FILE`` to make it a record
of paper/traces/).  No shrinking (each step would be two more traces): the draw is reported as drawn.

What the strategy draws (:func:`configs`): hidden size 64-384; heads 1-8; q_lora_rank null or 4-128; kv_lora_rank
4-128; rope (even) 2-32, nope 4-64 and v 4-64 head dims; dense FFN 16-512, experts' 8-256; 2-9 routed experts; 0-3
shared experts; 0-2 dense layers then 1-2 MoE layers, moe_layer_freq left out or 1-3 (V2/V3 configs; the last layer
still MoE: Megatron-Core's MTP block takes the last layer's spec, gpt_layer_specs.py get_gpt_mtp_block_spec, where
memsym counts DeepSeek-V3's MoE block); attention_dropout left out, 0 or 0.05-0.5; vocabulary 64-2048; tied or not;
0-1 MTP module (Megatron-Core builds and trains it; transformers builds none). A field a framework's preset refuses
(:data:`REFUSED`: moe_layer_freq under transformers, which ignores it; attention_dropout above 0) must be refused,
and the config written as the refusal says predicts the measurement (:func:`as_told`).  The routing
(:func:`routings`, issue 26 item 3): model_type deepseek_v3, deepseek_v2, deepseek_v32 or glm_moe_dsa
(DeepSeek-V3.2: V3's router with DSA's lightning indexer of 1-4 heads, a head dimension of the RoPE dims plus
0-32 and top-k 1-96; GLM-5: the same, its router V3's, with each layer after the first full or shared as
indexer_types lists them, as index_topk_freq 1-3 and index_skip_topk_offset 1-3 give them, or every layer full;
both traced in transformers only: Megatron-Core's DSA is not traced yet); topk_method noaux_tc (the expert
bias; deepseek_v3 only), greedy or group_limited_greedy; scoring_func sigmoid, or softmax without noaux_tc;
n_group groups (one group included) keeping topk_group 1..n_group, or (a greedy deepseek_v2 config) no groups
at all; top-k 1..min(4, experts in the kept groups); norm_topk_prob true or false; routed_scaling_factor
left out (the config class's default, in both frameworks: memsym/trace/mcore.py routing_fields) or 0.125-32.
What each framework runs of it: transformers' DeepSeek-V3 code always takes the sigmoid, the expert bias and the
groups, whatever scoring_func and topk_method say; its DeepSeek-V2 code always the softmax, never normalises, and
limits the groups for group_limited_greedy only; Megatron-Core follows scoring_func (pre-softmax), has the expert
bias for noaux_tc, the group-limited top-k whenever topk_group is given, and normalises the sigmoid top-k whatever
norm_topk_prob says.  Training: micro-batch 1-2; sequence 64-384 (any integer); BF16 or FP32;
recomputation none or full (transformers), none, full or selective (Megatron-Core); Megatron-Core's SwiGLU
fused or unfused, router dtype FP32 or the activations', auxiliary loss none, seq or global
(memsym/trace/inputs.py MCORE_SETTINGS); transformers' experts loop or grouped (grouped_mm:
torch._grouped_mm needs 16-byte strides, so h and h_E are then multiples of 8).

Restricted, and why (every draw is traced in both frameworks, a deepseek_v32 or glm_moe_dsa one in transformers
only; none is skipped):
* what a framework cannot build is not drawn: softmax scores with noaux_tc (Megatron-Core refuses the
  expert bias with softmax scores); noaux_tc in a deepseek_v2 config (transformers' DeepseekV2TopkRouter has
  no such top-k: memsym/trace/inputs.py check_routing; Megatron-Core would run it as a deepseek_v3 one);
  groups of one expert in a deepseek_v3 config (DeepseekV3TopkRouter sums each group's top 2); a deepseek_v3
  config without n_group/topk_group (DeepseekV3Config's 8 groups keeping 4 need 16 or more experts);
  topk_group without n_group (Megatron-Core refuses it) or n_group without topk_group (both frameworks ignore
  it); more top-k than experts in the kept groups (Megatron-Core's masked scores would route to -inf).
* deepseek_v2 configs: hidden size a multiple of the heads (DeepseekV2Config refuses others) and, in FP32,
  even qk_nope_head_dim and kv_lora_rank (its complex RoPE's view_as_complex needs even strides and offsets;
  in BF16 the ``.float()`` before it is a contiguous copy).
* attention is eager in both: Megatron-Core's local spec has only the unfused DotProductAttention;
  transformers' flash needs a GPU, and its sdpa on CPU runs PyTorch's math kernel (an FP32 upcast no
  preset models: paper/traces/hf-tiny-b2-s256-bf16-sdpa-loop.toml is recorded as unexplained).
* model_type kimi_k2 is not drawn (transformers runs DeepSeek-V3's code for it, as for deepseek_v3).
"""
import itertools
import json
import math
import os
import random
import tempfile
import types
from pathlib import Path
from typing import Dict, Mapping, Tuple

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from derivations import families
from derivations.config import hfconfig
from memsym.trace.inputs import MCORE_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
BASE = json.loads((ROOT / "tests" / "data" / "tiny" / "config.json").read_text())

#: The run's seed: MEMSYM_RANDOM_SEED, else a fresh one (printed: conftest.py's terminal summary, failures).
SEED = int(os.environ.get("MEMSYM_RANDOM_SEED") or random.SystemRandom().randrange(2 ** 32))
#: Draws per run, each traced once per framework (about 1 s a trace on a CI core).
EXAMPLES = int(os.environ.get("MEMSYM_RANDOM_EXAMPLES") or 12)
#: The model types with DeepSeek Sparse Attention (transformers models/deepseek_v32, models/glm_moe_dsa)
DSA = ("deepseek_v32", "glm_moe_dsa")


@st.composite
def routings(draw, N: int):
    """The routing fields of a config of N routed experts (module docstring): model_type, scoring_func,
    topk_method, n_group/topk_group (or none), num_experts_per_tok, norm_topk_prob, routed_scaling_factor."""
    # deepseek_v2: transformers runs DeepseekV2TopkRouter (softmax, greedy / group-limited greedy); deepseek_v32:
    # DeepSeek-V3's router and MoE, with DSA's lightning indexer in the attention; glm_moe_dsa: the same router
    # (GlmMoeDsaTopkRouter is V3's), its shared layers without an indexer
    mt = draw(st.sampled_from(["deepseek_v2", "deepseek_v3"] + list(DSA)))
    v2 = mt == "deepseek_v2"
    if v2:  # transformers' DeepSeek-V2 code has no noaux_tc (memsym/trace/inputs.py check_routing)
        method = draw(st.sampled_from(["greedy", "group_limited_greedy"]))
    else:
        method = draw(st.sampled_from(["noaux_tc", "greedy", "group_limited_greedy"]))
    # Megatron-Core refuses the expert bias (noaux_tc) with softmax scores
    scoring = "sigmoid" if method == "noaux_tc" else draw(st.sampled_from(["sigmoid", "softmax"]))
    # DeepSeek-V3's code sums each group's top 2 (a group holds at least 2) and has no config without groups
    # (DeepseekV3Config's 8 and 4 do not divide 2-9 experts into groups of 2); DeepSeek-V2's takes each group's
    # maximum (groups of one expert too) and a greedy V2 config may leave the groups out (no group-limited top-k)
    fits = [g for g in range(1, N + 1) if N % g == 0 and (v2 or g == 1 or N // g >= 2)]
    has_groups = not v2 or method == "group_limited_greedy" or draw(st.booleans())
    G = draw(st.sampled_from(fits)) if has_groups else 1
    kG = draw(st.integers(1, G)) if has_groups else 1
    out = dict(model_type=mt, scoring_func=scoring, topk_method=method,
               n_group=G if has_groups else None, topk_group=kG if has_groups else None,
               num_experts_per_tok=draw(st.integers(1, min(4, kG * (N // G)))),
               norm_topk_prob=draw(st.booleans()),
               routed_scaling_factor=draw(st.none() | st.sampled_from([1.0, 2.5, 16.0]) | st.floats(0.125, 32.0)))
    return {k: v for k, v in out.items() if v is not None}  # None: the field left out (its class's default)


@st.composite
def configs(draw):
    """(config.json fields, training settings) of one small DeepSeek-family model (module docstring)."""
    grouped = draw(st.booleans())  # transformers' experts implementation (torch._grouped_mm: 16-byte strides)
    N = draw(st.integers(2, 9))
    routing = draw(routings(N))
    nh = draw(st.integers(1, 8))
    # h: a multiple of 8 for grouped_mm; DeepseekV2Config also refuses h not a multiple of the heads
    mult = math.lcm(8 if grouped else 1, nh if routing["model_type"] == "deepseek_v2" else 1)
    h = draw(st.integers(-(-64 // mult), 384 // mult)) * mult
    hmult = 8 if grouped else 1
    act_dtype = draw(st.sampled_from(["bf16", "fp32"]))
    # DeepSeek-V2's complex RoPE views q_pe and k_pe as complex (view_as_complex: even strides and offset); in
    # FP32 .float() is no copy, so the columns before them (qk_nope_head_dim, kv_lora_rank) must be even
    pair = 2 if routing["model_type"] == "deepseek_v2" and act_dtype == "fp32" else 1
    dense, moe = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    c = {k: v for k, v in BASE.items()
         if k not in ("architectures", "torch_dtype", "n_group", "topk_group", "routed_scaling_factor")}
    c.update(
        hidden_size=h, num_attention_heads=nh, num_key_value_heads=nh,
        q_lora_rank=draw(st.none() | st.integers(4, 128)),
        kv_lora_rank=draw(st.integers(4 // pair, 128 // pair)) * pair,
        qk_rope_head_dim=2 * draw(st.integers(1, 16)), qk_nope_head_dim=draw(st.integers(4 // pair, 64 // pair)) * pair,
        v_head_dim=draw(st.integers(4, 64)), intermediate_size=draw(st.integers(16, 512)),
        moe_intermediate_size=draw(st.integers(8 // hmult, 256 // hmult)) * hmult,
        n_routed_experts=N, n_shared_experts=draw(st.integers(0, 3)), first_k_dense_replace=dense,
        num_hidden_layers=dense + moe, vocab_size=draw(st.integers(64, 2048)),
        tie_word_embeddings=draw(st.booleans()), num_nextn_predict_layers=draw(st.integers(0, 1)), **routing)
    if routing["model_type"] not in DSA:  # (DSA's configs build their MoE layers from first_k_dense_replace alone)
        # the last layer stays MoE: Megatron-Core builds the MTP module's block with the last layer's spec
        freq = draw(st.none() | st.sampled_from([f for f in (1, 2, 3) if (dense + moe - 1) % f == 0]))
        c.update({} if freq is None else {"moe_layer_freq": freq})
    dropout = draw(st.none() | st.just(0.0) | st.floats(0.05, 0.5))
    c.update({} if dropout is None else {"attention_dropout": dropout})
    if routing["model_type"] in DSA:  # the indexer reads the compressed query and rotates d_h^R dims
        c.update(q_lora_rank=draw(st.integers(4, 128)), index_n_heads=draw(st.integers(1, 4)),
                 index_head_dim=c["qk_rope_head_dim"] + 2 * draw(st.integers(0, 16)),
                 index_topk=draw(st.integers(1, 96)))
    if routing["model_type"] == "glm_moe_dsa":  # which layers run their own indexer (layer 0 always does)
        sharing = draw(st.sampled_from(["types", "freq", "none"]))
        if sharing == "types":
            c["indexer_types"] = ["full"] + [draw(st.sampled_from(["full", "shared"])) for _ in range(dense + moe - 1)]
        elif sharing == "freq":
            c.update(index_topk_freq=draw(st.integers(1, 3)), index_skip_topk_offset=draw(st.integers(1, 3)))
    common = dict(mbs=draw(st.integers(1, 2)), seq=draw(st.integers(64, 384)),
                  act_dtype=act_dtype, attention="eager")
    training = {
        "transformers": dict(common, experts="grouped" if grouped else "loop",
                             recompute=draw(st.sampled_from(["none", "full"]))),
        "mcore": dict(common, experts="loop", recompute=draw(st.sampled_from(["none", "full", "selective"])),
                      settings={k: draw(st.sampled_from(sorted(v[1]))) for k, v in MCORE_SETTINGS.items()}),
    }
    if routing["model_type"] in DSA:  # Megatron-Core's DSA is not traced yet (memsym/trace/inputs.py)
        del training["mcore"]
    return c, training


def command(framework: str, path: str, t: dict) -> str:
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in t.get("settings", {}).items())
    return (f"python -m memsym trace --framework {framework} --model {path} --mbs {t['mbs']} --seq {t['seq']} "
            f"--act-dtype {t['act_dtype']} --attention {t['attention']} --experts {t['experts']} "
            f"--recompute {t['recompute']}{extra}")


def trace(framework: str, path: str, t: dict) -> dict:
    """``memsym trace --json``'s measured and predicted bytes, in this process."""
    from memsym.trace import hf, mcore
    from memsym.trace.compare import result
    rec, info = (hf if framework == "transformers" else mcore).run(path, **t)
    given = {k: v for k, v in t.items() if k != "settings"}
    return result(types.SimpleNamespace(framework=framework, conventions=None, tensors=False, model=path, **given,
                                        **t.get("settings", {})), rec, info)


def differences(out: dict) -> list:
    """Where measured and predicted differ: [(where, measured, predicted)]."""
    m, p = out["measured"], out["predicted"]
    if "error" in p:
        return [("prediction", None, p["error"])]
    ml, pl = m["activations_by_layer"], p["activations_by_layer"]
    bad = [(f"layer {a['layer']} ({a['kind']})", a["bytes"], b["bytes"]) for a, b in zip(ml, pl)
           if (a["kind"], a["bytes"]) != (b["kind"], b["bytes"])]
    if len(ml) != len(pl):
        bad.append(("layers", len(ml), len(pl)))
    if m["activations_outside_layers"] != p["activations_outside_layers"]:
        bad.append(("outside the layers", m["activations_outside_layers"], p["activations_outside_layers"]))
    return bad


def _have_trace():
    from memsym.trace import missing
    return missing("transformers") is None and missing("mcore") is None


#: How the random tests draw: EXAMPLES fresh draws, no database, no shrinking (each step would be more traces).
DRAWS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
                 phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
_DRAWS = itertools.count(1)
_DIR = []  # the folder of the drawn config.json files (made on the first draw; kept for the commands printed)


def _path() -> str:
    if not _DIR:
        _DIR.append(tempfile.mkdtemp(prefix="memsym-random-"))
    return os.path.join(_DIR[0], f"config-{SEED}-{next(_DRAWS)}.json")


@pytest.mark.trace
@pytest.mark.skipif(not _have_trace(), reason="needs pip install 'memsym[trace]'")
@seed(SEED)
@DRAWS
@given(draw=configs())
def test_random_config_is_predicted_in_both_frameworks(draw, record_property):
    """Every draw, traced in transformers and in Megatron-Core (a deepseek_v32 or glm_moe_dsa one in transformers
    only): measured == predicted per layer and outside."""
    record_property("random_seed", SEED)
    check_draw(*draw)


#: What a framework's conventions refuse of a config (derivations/families/deepseek/config.py ``ModelSpec.unread``),
#: and the config as the refusal says to write it: {field: (refused by (framework, config) -> bool, the field as told)}
REFUSED = {
    # transformers 5.24 ignores moe_layer_freq: every layer from first_k_dense_replace on is MoE
    "moe_layer_freq": (lambda fw, c: fw == "transformers" and any(
        i % c.get("moe_layer_freq", 1) for i in range(c.get("first_k_dense_replace", 0), c["num_hidden_layers"])), 1),
    "attention_dropout": (lambda fw, c: c.get("attention_dropout", 0) > 0, 0.0),
}


def as_told(framework: str, path: str, c: dict, t: dict, out: dict) -> list:
    """Where a refused draw is off: the preset must refuse exactly the fields :data:`REFUSED` names, and the config
    written as the refusal tells must predict the measurement: exactly for moe_layer_freq (transformers builds the
    same model), and for attention_dropout less the dropout's noise and output (B_a per score each, ATen's CPU
    _dropout_impl) in place of the probabilities (B_a, unless they are the FP32 softmax output the softmax keeps
    anyway) in every layer whose scores are kept (no recomputation)."""
    from memsym.trace.compare import predicted
    fields = [f for f, (refused, _) in REFUSED.items() if refused(framework, c)]
    error = out["predicted"].get("error", "")
    if not fields:
        return differences(out)
    if f"hf-config.{fields[0]}" not in error and f": {fields[0]}=" not in error:
        return [("refusal", error or "none", f"{fields[0]} refused")]
    told = dict(c, **{f: REFUSED[f][1] for f in fields})
    Path(path + ".told.json").write_text(json.dumps(told, indent=2))
    given = {k: v for k, v in t.items() if k != "settings"}
    args = types.SimpleNamespace(framework=framework, conventions=None, tensors=False, model=path + ".told.json",
                                 **given, **t.get("settings", {}))
    pred = predicted(args, framework)
    if "attention_dropout" in fields and t["recompute"] == "none":
        ba = 2 if t["act_dtype"] == "bf16" else 4
        extra = ba * (1 + (ba == 4)) * t["mbs"] * c["num_attention_heads"] * t["seq"] ** 2
        pred["activations_by_layer"] = [dict(x, bytes=x["bytes"] + extra) for x in pred["activations_by_layer"]]
    return differences(dict(out, predicted=pred))


def check_draw(c: dict, training: dict) -> None:
    """Write the drawn config.json, trace it in each framework of ``training`` and fail (saying the seed, the
    commands that re-measure it and the config) where measured != predicted (a refused field: :func:`as_told`)."""
    path = _path()
    text = json.dumps(c, indent=2)
    Path(path).write_text(text)
    failures = []
    for framework, t in training.items():
        fc, fpath = c, path
        if framework == "mcore" and c.get("attention_dropout", 0) > 0:
            # Megatron-Core draws keep no attention dropout: with it, one layer's dropout noise and output were
            # measured outside the layers (seed 2450824702: 1,464,216 B at b 2, s 247, 6 heads), where Megatron-Core
            # keeps them not derived yet (issue 43 item 5 open for Megatron-Core's dropout)
            fc, fpath = {k: v for k, v in c.items() if k != "attention_dropout"}, path + ".mcore.json"
            Path(fpath).write_text(json.dumps(fc, indent=2))
        try:
            bad = as_told(framework, fpath, fc, t, trace(framework, fpath, t))
        except Exception as exc:  # a framework refusing a drawn config is a failing draw too: say which
            bad = [("trace", f"{type(exc).__name__}: {exc}", "a measurement")]
        if bad:
            rows = "\n".join(f"    {w}: measured {m}, predicted {p}" for w, m, p in bad)
            failures.append(f"{framework}: {command(framework, path, t)}\n{rows}")
    if failures:
        msg = (f"MEMSYM_RANDOM_SEED={SEED}: measured != predicted\n" + "\n".join(failures)
               + f"\n{path}:\n{text}\n(add --record paper/traces/NAME.toml to a command to make it a record)")
        pytest.fail(msg, pytrace=False)


def test_the_strategy_draws_valid_configs():
    """Every draw is a config memsym's reader takes (derivations/config/hfconfig.py) within the trace's
    limits and routings (memsym/trace/inputs.py), and its routing fits both frameworks: transformers'
    DeepSeek-V3 code (a group holds at least two experts), DeepSeek-V2's (h a multiple of the heads, no
    noaux_tc, groups for group_limited_greedy), Megatron-Core's (no expert bias with softmax scores, the
    groups divide the experts, the kept groups hold at least top-k) (no torch needed)."""
    from memsym.trace import inputs

    seen = set()

    @seed(SEED)
    @settings(max_examples=300, deadline=None, database=None)
    @given(draw=configs())
    def check(draw):
        c, training = draw
        _, spec = inputs.of(c)
        N, k = c["n_routed_experts"], c["num_experts_per_tok"]
        G, kG = spec.groups()
        v2 = c["model_type"] == "deepseek_v2"
        assert (G is None) == (kG is None) and (G is not None or v2 and c["topk_method"] == "greedy")
        G, kG = G or 1, kG or 1
        assert N % G == 0 and (v2 or G == 1 or N // G >= 2) and 1 <= kG <= G and 1 <= k <= min(4, kG * N // G)
        assert not (spec.routing_bias and spec.scoring_func == "softmax")
        if v2:
            assert c["hidden_size"] % c["num_attention_heads"] == 0 and c["topk_method"] != "noaux_tc"
            if training["transformers"]["act_dtype"] == "fp32":
                assert c["qk_nope_head_dim"] % 2 == 0 and c["kv_lora_rank"] % 2 == 0
        assert spec.l == c["num_hidden_layers"] and spec.first_k_dense < spec.l
        freq = c.get("moe_layer_freq", 1)  # DeepSeek's rule: MoE from first_k_dense_replace on, every freq-th layer
        assert spec.layer_kinds() == ["moe" if i >= c["first_k_dense_replace"] and i % freq == 0 else "dense"
                                      for i in range(spec.l)] and "moe" in spec.layer_kinds()
        assert spec.attention_dropout == c.get("attention_dropout", 0.0)
        for framework, t in training.items():
            inputs.check_size(spec, t["mbs"], t["seq"])
            inputs.check_routing(framework, spec)
            inputs.check_options(framework, t["attention"], t["experts"], t["recompute"], t.get("settings"))
            if t["experts"] == "grouped":
                assert c["hidden_size"] % 8 == 0 and c["moe_intermediate_size"] % 8 == 0
        seen.add((c["model_type"], spec.scoring_func, spec.topk_method, spec.norm_topk_prob, spec.group_limited,
                  G == 1, "routed_scaling_factor" in c, c.get("moe_layer_freq", 1) > 1, spec.attention_dropout > 0))
    check()
    # every routing variant is drawn: both model types, scores, top-k methods, norm_topk_prob, groups or none,
    # one group, the scaling factor given or left out
    for i, values in enumerate([{"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa"}, {"sigmoid", "softmax"},
                                {"noaux_tc", "greedy", "group_limited_greedy"}, {True, False}, {True, False},
                                {True, False}, {True, False}, {True, False}, {True, False}]):
        assert {v[i] for v in seen} == values, i


class _Consulted(dict):
    """A config's fields that remember which of them a reader consulted (looked up, tested or got)."""

    def __init__(self, data: Mapping):
        super().__init__(data)
        self.seen = set()

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)


def fields_read(data: Mapping) -> Tuple[str, ...]:
    """The fields of a config.json the reader of its model_type consults (its family's ``from_fields``, run on
    ``data``): each one read or refused; every other field is ignored."""
    consulted = _Consulted(data)
    hfconfig.from_dict(consulted)
    return tuple(sorted(consulted.seen))


def fields_table(configs) -> str:
    """The Markdown table of :func:`fields_read` per model type, over the given configs (each model type a column,
    in the families' order; a wrapper's config counts as its language model's): a row per field."""
    read: Dict[str, set] = {mt: set() for mt in families.model_types() if families.wrapper(mt) is None}
    for c in configs:
        read[c["model_type"]] |= set(fields_read(c))
    read = {mt: fields for mt, fields in read.items() if fields}
    rows = [f"| `{f}` | " + " | ".join("yes" if f in fields else "" for fields in read.values()) + " |"
            for f in sorted(set().union(*read.values()))]
    return "\n".join(["| field | " + " | ".join(f"`{mt}`" for mt in read) + " |",
                      "|---|" + "---|" * len(read)] + rows)


def test_the_readme_lists_the_fields_each_reader_reads():
    """README's table of config fields is what the readers consult on the released configs (regenerated here), and
    every field the strategy draws is one the deepseek_v3 reader reads (none drawn in vain)."""
    from memsym.trace import inputs
    released = [json.loads(p.read_text()) for p in sorted((ROOT / "derivations" / "models").glob("*.json"))
                + sorted((ROOT / "paper" / "models").glob("*.json"))]
    table = fields_table([c for c in released if c["model_type"] != "kimi_k25"])  # (a wrapper: its text_config)
    readme = (ROOT / "README.md").read_text()
    assert readme.split("<!-- fields: generated -->\n")[1].split("\n<!-- /fields -->")[0] == table
    read = set(fields_read(BASE))

    @seed(SEED)
    @settings(max_examples=50, deadline=None, database=None)
    @given(draw=configs())
    def check(draw):
        c = draw[0]
        if c["model_type"] == "deepseek_v3":
            # what only the implementations read (checked by the trace: no tensor's size), and the tokenizer's ids
            assert set(c) - set(inputs.EXTRA_FIELDS) - {"bos_token_id", "eos_token_id", "use_cache"} <= read
    check()


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the random traces must run, not skip
    assert _have_trace(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"
