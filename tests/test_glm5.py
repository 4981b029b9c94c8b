"""GLM-5 (``glm_moe_dsa``) in the DeepSeek family: DeepSeek-V3.2's sparse attention whose ``shared`` layers have no
indexer and reuse the top-k of the full layer before them (transformers 5.24 models/glm_moe_dsa:
GlmMoeDsaConfig.__post_init__ builds ``indexer_types``; GlmMoeDsaAttention sets ``indexer = None`` on a shared layer).
A stage holds L_I indexers (derivations/families/deepseek FAMILY.counts / additions, ModelSpec.layer_features).

The oracle is transformers' own code, never memsym's terms: its config class for the per-layer indexer types and
its GlmMoeDsaForCausalLM built on the meta device for the parameters, layer by layer, of the tiny config
(tests/data/glm5: layers full, shared, shared, full over dense, dense, MoE, MoE) and of GLM-5's dimensions
(tests/data/glm-5: GlmMoeDsaConfig's defaults, documented as the zai-org/GLM-5 checkpoint).  Tests needing
transformers are skipped without it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from derivations import config as cfg
from symbolic.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "glm5" / "config.json"
RELEASED = ROOT / "tests" / "data" / "glm-5" / "config.json"
DSA = ROOT / "tests" / "data" / "dsa" / "config.json"
V3 = ROOT / "tests" / "data" / "tiny" / "config.json"


def _memsym(*argv):
    out = subprocess.run([sys.executable, "-m", "memsym", *map(str, argv)], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    return json.loads(out.stdout)


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _keep(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("architectures", "_comment", "torch_dtype")}


def _meta(config: dict):
    """transformers' GlmMoeDsaForCausalLM built on the meta device from ``config`` (no memory, no weights): a dict of
    its total parameters, the routing biases (buffers), and per layer its MLP kind, whether its attention holds an
    indexer, its parameters, its indexer's and its attention's without norms and indexer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conf = transformers.GlmMoeDsaConfig(**_keep(config))
    with torch.device("meta"):
        model = transformers.GlmMoeDsaForCausalLM(conf)
    count = lambda module: sum(p.numel() for p in module.parameters())
    layers = []
    for layer in model.model.layers:
        attn = layer.self_attn
        own = {n: p.numel() for n, p in attn.named_parameters()}
        layers.append({"kind": "moe" if hasattr(layer.mlp, "experts") else "dense",
                       "indexer": attn.indexer is not None, "params": count(layer),
                       "indexer_params": count(attn.indexer) if attn.indexer is not None else 0,
                       "mla": sum(v for k, v in own.items() if "layernorm" not in k and not k.startswith("indexer."))})
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    return {"total": count(model), "bias": bias, "layers": layers, "embedding": count(model.model.embed_tokens),
            "head": count(model.lm_head), "norm": count(model.model.norm), "indexer_types": list(conf.indexer_types)}


def _config(path):
    return json.loads(Path(path).read_text())


# ----------------------------------------------------------------------------- reading
def test_a_glm_moe_dsa_config_reads_its_indexer_layers():
    model = cfg.load_model(str(TINY))
    assert model.model_type == "glm_moe_dsa" and model.indexer and (model.n_I, model.d_I, model.k_I) == (2, 32, 16)
    assert model.indexer_types == ("full", "shared", "shared", "full")
    assert [sorted(f) for f in model.layer_features()] == [["indexer"], [], [], ["indexer"]]
    assert model.layer_kinds() == ["dense", "dense", "moe", "moe"]
    assert model.structure[-1] is True and model.routing_bias  # the indexer structure; noaux_tc, as GLM routes
    # DeepSeek-V3.2: every layer holds one (no indexer_types to read)
    v32 = cfg.load_model(str(DSA))
    assert v32.indexer_types == () and all(f == {"indexer"} for f in v32.layer_features())
    assert all(f == frozenset() for f in cfg.load_model(str(V3)).layer_features())


def test_glm5_defaults_are_glmmoedsaconfigs():
    """What a config leaves out reads as GlmMoeDsaConfig's defaults: index_n_heads 32 (V3.2's is 64), n_group and
    topk_group 1, first_k_dense_replace's 3 dense layers, every layer full."""
    transformers = pytest.importorskip("transformers")
    data = _config(RELEASED)
    conf = transformers.GlmMoeDsaConfig()
    model = cfg.load_model(str(RELEASED))
    assert (model.n_I, model.d_I, model.k_I) == (conf.index_n_heads, conf.index_head_dim, conf.index_topk)
    assert model.groups() == (conf.n_group, conf.topk_group)
    assert model.layer_kinds() == ["dense" if x == "dense" else "moe" for x in conf.mlp_layer_types]
    assert list(model.indexer_types) == conf.indexer_types
    bare = {k: v for k, v in data.items() if not k.startswith("index_") and k not in ("n_group", "topk_group")}
    assert cfg.hfconfig.from_dict(bare, "bare.json").named() == model.named()
    # the file is the class's defaults (their source), field by field
    given = {k: v for k, v in data.items() if k not in ("_comment", "architectures")}
    assert {k: v for k, v in conf.to_dict().items() if k in given} == given


VARIANTS = [{}, {"index_topk_freq": 3}, {"index_topk_freq": 2, "index_skip_topk_offset": 3},
            {"index_topk_freq": 4, "index_skip_topk_offset": 1}, {"index_skip_topk_offset": 0},
            {"index_topk_pattern": "FSSFFSFS"}, {"index_topk_pattern": ["full", "shared"] * 4},
            {"indexer_types": ["full"] * 7 + ["shared"], "index_topk_pattern": "FFFFFFFF"}]


@pytest.mark.parametrize("change", VARIANTS, ids=[json.dumps(v) for v in VARIANTS])
def test_indexer_types_are_transformers(tmp_path, change):
    """The per-layer indexer types as GlmMoeDsaConfig.__post_init__ builds them: indexer_types, else
    index_topk_pattern, else index_topk_freq / index_skip_topk_offset."""
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in _config(TINY).items() if k not in ("indexer_types", "mlp_layer_types")}
    data = {**data, "num_hidden_layers": 8, **change}
    want = transformers.GlmMoeDsaConfig(**_keep(data)).indexer_types
    assert list(cfg.load_model(str(_write(tmp_path, data))).indexer_types) == want
    assert want != ["full"] * 8 or change in ({}, {"index_skip_topk_offset": 0})  # the variants share layers


# ----------------------------------------------------------------------------- parameters
def _freq(tmp_path):
    """GLM-5's dimensions with every third layer after the first two full (index_topk_freq 3: 27 of 78)."""
    return _write(tmp_path, {**_config(RELEASED), "index_topk_freq": 3})


@pytest.mark.parametrize("which", ["tiny", "released", "released-freq3"])
def test_parameters_equal_transformers_model_on_the_meta_device(which, tmp_path):
    path = {"tiny": TINY, "released": RELEASED}.get(which) or _freq(tmp_path)
    data = _config(path)
    meta = _meta(data)
    paper, ckpt = _memsym("params", "--model", path, "--json"), _memsym("params", "--model", path, "--accounting",
                                                                          "checkpoint", "--json")
    # the paper's accounting leaves out the final RMSNorm; a checkpoint holds it and the noaux_tc routing biases
    # (buffers in transformers)
    assert paper["total"] + meta["norm"] == meta["total"]
    assert ckpt["total"] == meta["total"] + meta["bias"]
    layers = meta["layers"]
    assert paper["layer_kinds"] == {"dense": sum(x["kind"] == "dense" for x in layers),
                                    "moe": sum(x["kind"] == "moe" for x in layers),
                                    "indexer": sum(x["indexer"] for x in layers)}
    per = paper["per_layer"]
    assert {x["indexer_params"] for x in layers if x["indexer"]} == {per["indexer"]}
    assert {x["mla"] for x in layers} == {per["mla"]}
    for x in layers:  # every layer: its kind's parameters and, if it runs one, its indexer's
        assert x["params"] == per[f"{x['kind']}_layer"] + x["indexer_params"]
    if which == "released-freq3":
        assert sum(x["indexer"] for x in layers) == 27  # layer 0, then 1, 4, ..., 76


@pytest.mark.parametrize("which", ["tiny", "released-freq3"])
def test_each_pipeline_stage_holds_its_own_indexers(which, tmp_path):
    """Split by the pipeline, each stage's parameters are its layers' in transformers' model (+ the embedding on the
    first, + the head on the last): L_I counts the stage's full layers, never the shared ones."""
    path = TINY if which == "tiny" else _freq(tmp_path)
    meta = _meta(_config(path))
    n = len(meta["layers"])
    for pp in (n, 2, 3) if which == "tiny" else (16, 13, 6):
        got = _memsym("params", "--model", path, "--pp", pp, "--json")["stages"]
        for st in got:
            first, last = st["layers"]
            want = sum(x["params"] for x in meta["layers"][first:last + 1])
            want += meta["embedding"] * st["embedding"] + meta["head"] * st["head"]
            assert st["params"] == want, (pp, st["stage"])


def test_glm5_has_744b_parameters():
    """GLM-5's published size (zai-org/GLM-5 README: 744B parameters, 40B active) at GlmMoeDsaConfig's
    dimensions, which the meta-device model confirms to the parameter (test above)."""
    got = _memsym("params", "--model", RELEASED, "--json")
    assert round(got["total"] / 1e9) == 744
    assert int(got["activated"]["without_embedding"] / 1e9) == 40


def test_estimate_holds_each_stages_indexers():
    """One device of each stage (TP = EP = 1, no ZeRO): its parameters are its layers' in transformers' model;
    under DualPipe a device holds two stages', both with their own indexers."""
    meta = _meta(_config(TINY))
    layer = [x["params"] for x in meta["layers"]]
    base = ["estimate", "--model", TINY, "--dp", 1, "--tp", 1, "--ep", 1, "--mbs", 1, "--seq", 64, "--json"]
    for stage in range(4):
        est = _memsym(*base, "--pp", 4, "--stage", stage)
        want = layer[stage] + meta["embedding"] * (stage == 0) + meta["head"] * (stage == 3)
        assert est["params"]["total"] == want, stage
    est = _memsym(*base, "--pp", 2, "--stage", 0, "--schedule", "dualpipe", "--microbatches", 8)
    assert est["params"]["total"] == sum(layer) + meta["embedding"] + meta["head"]


@pytest.mark.parametrize("schedule", [None, "1f1b"])
def test_search_rows_are_the_estimates(schedule):
    """The search reads L_I per stage (the printed assembly's composition): its rows at PP > 1 equal the
    exact estimate of the same configuration at the same stage."""
    extra = ["--schedule", schedule, "--microbatches", 8] if schedule else []
    got = _memsym("search", "--model", TINY, "--gpus", 8, "--seq", 64, "--hbm", "80GiB", "--overheads", "low",
                  "--top", 400, *extra, "--json")["rows"]
    rows = [r for r in got if r["pp"] > 1][:6]
    assert rows
    for r in rows:
        argv = [x for k in ("dp", "tp", "pp", "ep", "etp", "cp") for x in (f"--{k}", r[k])]
        est = _memsym("estimate", "--model", TINY, *argv, "--mbs", r["mbs"], "--seq", r["seq"], "--zero", r["zero"],
                      "--recompute", r["recompute"], "--stage", r["stage"], *extra, "--json")
        for k in ("weights", "gradients", "optimizer"):
            assert est["bytes"][k] == r[k], (r, k)


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("change,field,message", [
    ({"indexer_types": ["full", "shared"]}, "indexer_types", "once per layer (4)"),
    ({"indexer_types": ["full", "shared", "sparse", "full"]}, "indexer_types", "'full' or 'shared'"),
    ({"indexer_types": ["shared", "full", "full", "full"]}, "indexer_types", "layer 0 must be 'full'"),
    ({"indexer_types": None, "index_topk_pattern": "FSXF"}, "index_topk_pattern", "a string of F (full) and S"),
    ({"indexer_types": None, "index_topk_pattern": "FSS"}, "index_topk_pattern", "once per layer"),
    ({"indexer_types": None, "index_topk_freq": 0}, "index_topk_freq", "positive integer"),
    ({"indexer_types": None, "index_topk_freq": 2, "index_skip_topk_offset": 0}, "index_skip_topk_offset",
     "layer 0 must be 'full'"),
    ({"q_lora_rank": None}, "q_lora_rank", "GlmMoeDsaAttention"),
    ({"moe_layer_freq": 2}, "moe_layer_freq", "glm_moe_dsa code"),
    ({"mlp_layer_types": ["dense", "sparse", "dense", "sparse"]}, "mlp_layer_types", "first_k_dense_replace"),
])
def test_what_a_glm5_config_must_hold(tmp_path, change, field, message):
    data = {k: v for k, v in {**_config(TINY), **change}.items() if v is not None or k == "q_lora_rank"}
    with pytest.raises(ConfigError) as exc:
        cfg.load_model(str(_write(tmp_path, data)))
    assert f"field {field!r}" in str(exc.value) or field in str(exc.value)
    assert message in str(exc.value)


@pytest.mark.parametrize("path,field,message", [
    (DSA, "indexer_types", "read for model_type glm_moe_dsa only"),
    (DSA, "index_topk_freq", "read for model_type glm_moe_dsa only"),
    (V3, "index_skip_topk_offset", "a DSA indexer is read for model_type deepseek_v32 or glm_moe_dsa only"),
])
def test_shared_indexer_fields_elsewhere_are_refused(tmp_path, path, field, message):
    data = {**_config(path), field: ["full"] * 3 if field == "indexer_types" else 2}
    with pytest.raises(ConfigError, match=message):
        cfg.load_model(str(_write(tmp_path, data)))


def test_megatron_core_refuses_glm5():
    from memsym.trace import inputs
    with pytest.raises(ConfigError, match="glm_moe_dsa: Megatron-Core's DeepSeek Sparse Attention"):
        inputs.check_routing("mcore", cfg.load_model(str(TINY)))
