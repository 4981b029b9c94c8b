"""``memsym trace --fake``: real dimensions without memory (memsym/trace/fake.py).

Fast tests (no torch): the real-dimension records (DeepSeek-V3 and Moonlight-16B-A3B cut to one
dense and one MoE layer, b 1, s 4096, both frameworks) exist, say they are fake and how they were
routed, and their command reproduces them; ``--fake`` lifts the size limits of a real trace but
bounds layers, tokens and refuses recomputation, each in one line before torch is imported.  (That
the presets predict the records is tests/test_traces.py's test_preset_predicts_the_record, which
reads every record.)  Slow tests (marker ``trace``): a fake trace of the tiny config equals a real
trace with the same balanced routing, per layer, outside the layers and per tensor family, for
transformers and Megatron-Core; the routing is balanced.
"""
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from memsym.trace import records

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny" / "config.json"
V3_CUT = ROOT / "tests" / "data" / "deepseek-v3-l2" / "config.json"
MOONLIGHT_CUT = ROOT / "tests" / "data" / "moonlight-16b-a3b-l2" / "config.json"
FAKE = [r for r in records.load_all() if r["settings"].get("fake")]


def _json(path):
    return json.loads(Path(path).read_text())


# ---------------------------------------------------------------- the configs
def test_the_cuts_keep_every_field_of_their_model_but_the_layers():
    full_v3, cut = _json(ROOT / "tests" / "data" / "deepseek-v3" / "config.json"), _json(V3_CUT)
    changed = {k for k in full_v3 if full_v3[k] != cut.get(k)}
    assert changed == {"num_hidden_layers", "first_k_dense_replace", "num_nextn_predict_layers"}
    assert (cut["num_hidden_layers"], cut["first_k_dense_replace"], cut["num_nextn_predict_layers"]) == (2, 1, 0)
    full_ml, cut = _json(ROOT / "tests" / "data" / "moonlight-16b-a3b" / "config.json"), _json(MOONLIGHT_CUT)
    assert {k for k in full_ml if full_ml[k] != cut.get(k)} == {"_comment", "num_hidden_layers"}
    assert cut["num_hidden_layers"] == 2 and cut["first_k_dense_replace"] == 1
    assert all("_comment" in _json(p) for p in (V3_CUT, MOONLIGHT_CUT))


def test_moonlight_is_the_published_config():
    """moonshotai/Moonlight-16B-A3B's config.json (its provenance is the file's _comment)."""
    c = _json(ROOT / "tests" / "data" / "moonlight-16b-a3b" / "config.json")
    assert {k: c[k] for k in (
        "model_type", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
        "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "n_group", "topk_group", "topk_method", "scoring_func", "norm_topk_prob", "routed_scaling_factor",
        "vocab_size", "rope_theta", "tie_word_embeddings", "max_position_embeddings", "rms_norm_eps",
        "hidden_act")} == {
        "model_type": "deepseek_v3", "hidden_size": 2048, "intermediate_size": 11264, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64,
        "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "q_lora_rank": None,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 1,
        "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
        "routed_scaling_factor": 2.446, "vocab_size": 163840, "rope_theta": 50000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu"}


# ---------------------------------------------------------------- the records
def test_the_real_dimension_records_cover_both_models_and_frameworks():
    got = {(r["framework"], r["config"]["path"]) for r in FAKE}
    assert got == {(fw, str(p.relative_to(ROOT))) for fw in ("transformers", "mcore") for p in (V3_CUT, MOONLIGHT_CUT)}
    for r in FAKE:
        st = r["settings"]
        assert (st["mbs"], st["seq"], st["act_dtype"], st["recompute"]) == (1, 4096, "bf16", "none"), r["_file"]
        assert st["fake"] is True and "balanced" in r["note"] and "FakeTensorMode" in r["note"]
        assert "unexplained" not in r, r["_file"]            # the presets predict them to the byte
        argv = shlex.split(r["command"])
        assert "--fake" in argv and r["command"] == records.command(dict(st, framework=r["framework"],
                                                                         model=r["config"]["path"]))
        assert [x["kind"] for x in r["measured"]["activations_by_layer"]] == ["dense", "moe"]


def test_a_real_record_is_written_as_before():
    """A record without --fake has no fake setting, no note and no --fake in its command."""
    real = [r for r in records.load_all() if not r["settings"].get("fake")]
    assert real and all("fake" not in r["settings"] and "note" not in r and "--fake" not in r["command"]
                        for r in real)


# ---------------------------------------------------------------- the limits
@pytest.fixture()
def run(run_trace):
    return run_trace


@pytest.mark.parametrize("model,argv,said", [
    (V3_CUT, (), "MAX_PARAMS"),                                        # real tensors: too big for a CPU
    (ROOT / "tests" / "data" / "deepseek-v3" / "config.json", ("--fake",), "MAX_FAKE_LAYERS"),
    (V3_CUT, ("--fake", "--mbs", "16", "--seq", "4096"), "MAX_FAKE_TOKENS"),
    (V3_CUT, ("--fake", "--recompute", "full"), "--fake --recompute"),
    (TINY, ("--fake", "--framework", "mcore", "--recompute", "selective"), "--fake --recompute"),
])
def test_fake_limits_exit_2_in_one_line_naming_them(run, model, argv, said):
    code, err = run("--model", str(model), *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], err


# ---------------------------------------------------------------- slow: fake against real (torch)
def _have_torch():
    from memsym.trace import missing
    return missing("transformers") is None and missing("mcore") is None


def test_balanced_indices_give_every_expert_the_same_tokens():
    torch = pytest.importorskip("torch")
    from memsym.trace.fake import balanced_indices
    for t, n, k in ((512, 8, 2), (4096, 256, 8), (4096, 64, 6), (7, 5, 3)):
        idx = balanced_indices(t, n, k)
        assert idx.shape == (t, k) and idx.dtype == torch.int64
        assert all(len(set(row)) == k for row in idx.tolist())         # k distinct experts a token
        counts = torch.bincount(idx.ravel(), minlength=n)
        assert counts.max() - counts.min() <= 1 and int(counts.sum()) == t * k
        if t * k % n == 0:
            assert counts.tolist() == [t * k // n] * n


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
@pytest.mark.parametrize("framework", ["transformers", "mcore"])
def test_a_fake_trace_equals_a_real_trace_with_the_same_routing(framework):
    """tests/data/tiny, b 2, s 256: under FakeTensorMode (nothing allocated) the saved bytes of every
    layer, outside the layers and of every tensor family are those of a real trace whose top-k is
    replaced by the same balanced routing, and those the preset predicts."""
    import types
    from memsym.trace import hf, mcore
    from memsym.trace.compare import result
    impl = mcore if framework == "mcore" else hf
    st = dict(mbs=2, seq=256, act_dtype="bf16", attention="eager", experts="loop", recompute="none")
    out = {}
    for fake in (True, False):
        rec, info = impl.run(str(TINY), **st, fake=fake, balanced=True)
        # group, group choice and expert choice in each of the 2 MoE layers; Megatron-Core's seq_aux_loss (the
        # recipes') routes once more for its routing map (moe_utils.py compute_routing_scores_for_aux_loss)
        assert info["routing"].startswith(f"balanced: {8 if framework == 'mcore' else 6} top-k")
        out[fake] = result(types.SimpleNamespace(framework=framework, conventions=None, tensors=False,
                                                 model=str(TINY), fake=fake, **st), rec, info)
    fake, real = out[True]["measured"], out[False]["measured"]
    assert fake["activations_by_layer"] == real["activations_by_layer"]
    assert fake["activations_outside_layers"] == real["activations_outside_layers"]
    assert fake["families"] == real["families"]
    assert fake["activations_by_layer"] == out[True]["predicted"]["activations_by_layer"]
    assert fake["activations_outside_layers"] == out[True]["predicted"]["activations_outside_layers"]
    assert out[True]["trains"] == {"loss": None, "params_with_grad": 0}   # no backward under fake tensors
    assert out[False]["trains"]["params_with_grad"] > 0
    assert out[True]["settings"]["fake"] is True and "fake" not in out[False]["settings"]


@pytest.mark.trace
@pytest.mark.skipif(not _have_torch(), reason="needs pip install 'memsym[trace]'")
def test_balanced_routing_gives_every_expert_its_share_in_a_real_trace():
    """Megatron-Core's SequentialMLP names each expert's module: with balanced routing each of the 8 experts of
    the tiny config runs (b s N_r / N = 128 token-copies each) and saves the same bytes."""
    from memsym.trace import mcore
    from memsym.trace.compare import families
    rec, _ = mcore.run(str(TINY), 2, 256, balanced=True)
    per = {}
    for name, v in families(rec).items():
        m = re.search(r"\.local_experts\.(\d+)\b", name)
        if m:
            per[int(m.group(1))] = per.get(int(m.group(1)), 0) + v["bytes"]
    assert sorted(per) == list(range(8))
    # expert 0 is first to save views of the split tokens and probabilities (torch.split: one storage each),
    # so it holds their whole storages; every other expert the same bytes
    assert len({per[e] for e in range(1, 8)}) == 1 and per[0] > per[1]


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the slow tests must run, not skip
    assert _have_torch(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"
