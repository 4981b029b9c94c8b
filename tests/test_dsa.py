"""DeepSeek-V3.2's DeepSeek Sparse Attention in the DeepSeek family (derivations/families/deepseek: the ``indexer``
structure flag, the symbols n_I, d_I, k_I): configs read, the lightning indexer's parameters, and counts against
transformers' own model built on the meta device (the oracle: transformers 5.24 models/deepseek_v32, not memsym's
terms)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from derivations import config as cfg
from symbolic.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "dsa" / "config.json"


def _params(path, *extra):
    out = subprocess.run([sys.executable, "-m", "memsym", "params", "--model", str(path), "--json", *extra],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout)


def _transformers_count(config: dict):
    """(parameters, {module path: parameters} of layer 1's attention) of transformers' DeepseekV32ForCausalLM
    built on the meta device from ``config`` (no memory, no weights)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    keep = {k: v for k, v in config.items() if k not in ("architectures", "_comment", "torch_dtype")}
    conf = transformers.DeepseekV32Config(**keep)
    with torch.device("meta"):
        model = transformers.DeepseekV32ForCausalLM(conf)
    attn = {n: p.numel() for n, p in model.model.layers[1].self_attn.named_parameters()}
    return sum(p.numel() for p in model.parameters()), attn


def _released_shape(tmp_path):
    """DeepSeek-V3.2-Exp's dimensions: transformers' DeepseekV32Config defaults (documented as the
    deepseek-ai/DeepSeek-V3.2-Exp checkpoint's, configuration_deepseek_v32.py), written as a config.json."""
    transformers = pytest.importorskip("transformers")
    data = transformers.DeepseekV32Config().to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, default=str))
    return path, data


def test_a_deepseek_v32_config_has_an_indexer():
    model = cfg.load_model(str(TINY))
    assert model.indexer and (model.n_I, model.d_I, model.k_I) == (2, 32, 16)
    assert model.structure[-1] is True
    v3 = cfg.load_model(str(ROOT / "tests" / "data" / "tiny" / "config.json"))
    assert not v3.indexer and v3.structure[-1] is False


@pytest.mark.parametrize("path", [TINY, "released"], ids=["tiny", "released"])
def test_parameters_equal_transformers_model_on_the_meta_device(path, tmp_path):
    if path == "released":
        path, data = _released_shape(tmp_path)
    else:
        data = json.loads(Path(path).read_text())
    total, attn = _transformers_count(data)
    paper = _params(path)
    # transformers' model: every parameter of the main model (the routing bias is a buffer; no MTP module is built)
    assert paper["total"] + data["hidden_size"] == total  # + the final RMSNorm
    # the indexer is its own row (params.indexer, L_I of them: every layer of V3.2), beside the MLA
    indexer = sum(v for k, v in attn.items() if k.startswith("indexer."))
    assert paper["per_layer"]["indexer"] == indexer and paper["layer_kinds"]["indexer"] == data["num_hidden_layers"]
    assert paper["per_layer"]["mla"] + indexer == sum(v for k, v in attn.items() if "layernorm" not in k)
    n_I, d_I, d_cq, h = data["index_n_heads"], data["index_head_dim"], data["q_lora_rank"], data["hidden_size"]
    assert indexer == n_I * d_I * d_cq + d_I * h + 2 * d_I + n_I * h


def test_the_indexer_adds_its_parameters_to_v3s():
    v32, v3 = _params(TINY), _params(ROOT / "tests" / "data" / "tiny" / "config.json")
    indexer = 2 * 32 * 96 + 32 * 256 + 2 * 32 + 2 * 256
    assert v32["per_layer"]["indexer"] == indexer and "indexer" not in v3["per_layer"]
    assert v32["per_layer"]["mla"] == v3["per_layer"]["mla"]
    assert v32["total"] - v3["total"] == 3 * indexer  # one in each of the 3 layers


@pytest.mark.parametrize("change,field", [
    ({"q_lora_rank": None}, "q_lora_rank"),
    ({"index_head_dim": 8}, "index_head_dim"),
    ({"mlp_layer_types": ["sparse", "sparse", "sparse"]}, "mlp_layer_types"),
    ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
    ({"index_topk": 0}, "index_topk"),
    ({"moe_layer_freq": 2}, "moe_layer_freq"),
    ({"layer_types": ["indexed_attention"]}, "layer_types"),
])
def test_what_a_dsa_config_must_hold(tmp_path, change, field):
    data = {**json.loads(TINY.read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as exc:
        cfg.load_model(str(path))
    assert field in str(exc.value)


def test_an_indexer_field_elsewhere_is_refused(tmp_path):
    data = {**json.loads((ROOT / "tests" / "data" / "tiny" / "config.json").read_text()), "index_topk": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="deepseek_v32 or glm_moe_dsa only"):
        cfg.load_model(str(path))


def test_kimi_k25_reads_its_language_model(tmp_path):
    """Kimi K2.5 (transformers models/kimi_k25, Kimi_K25Config): the language model is its text_config (a DeepSeek-V3,
    kimi_k2 read as it is, deepseek_v3 when it names none); the vision tower is not counted."""
    k2 = json.loads((ROOT / "tests" / "data" / "variants" / "kimi_k2_shape.json").read_text())
    path = tmp_path / "k25.json"
    path.write_text(json.dumps({"model_type": "kimi_k25", "text_config": k2, "vision_config": {"hidden_size": 1152}}))
    assert _params(path)["total"] == _params(ROOT / "tests" / "data" / "variants" / "kimi_k2_shape.json")["total"]
    inner = {k: v for k, v in k2.items() if k != "model_type"}
    path.write_text(json.dumps({"model_type": "kimi_k25", "text_config": inner}))
    assert cfg.load_model(str(path)).model_type == "deepseek_v3"
    for text, message in (([1], "must be an object, got array"), (None, "must be an object, got null"),
                          ({**k2, "model_type": "kimi_k25"}, "a wrapper in a wrapper"),
                          ({**k2, "hidden_size": "x"}, "text_config: field 'hidden_size'")):
        path.write_text(json.dumps({"model_type": "kimi_k25", "text_config": text}))
        with pytest.raises(ConfigError, match=message):
            cfg.load_model(str(path))


def test_estimate_says_what_of_dsa_it_does_not_model():
    out = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--model", str(TINY), "--pp", "1", "--json"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    notes = json.loads(out.stdout)["assumptions"]
    assert any(n.startswith("DSA indexer:") and "not modelled" in n for n in notes)
    v3 = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--model", str(ROOT / "tests" / "data" / "tiny" /
                                                                                  "config.json"), "--pp", "1",
                                                                                  "--json"],
                        capture_output=True, text=True, cwd=ROOT, check=True)
    assert not any("DSA" in n for n in json.loads(v3.stdout)["assumptions"])
