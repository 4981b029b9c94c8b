"""The DeepSeek-V4 family (derivations/families/deepseek_v4): configs read as transformers 5.24 reads them, and
parameters counted against transformers' own DeepseekV4ForCausalLM built on the meta device (the oracle: its modules'
tensors, not memsym's terms), per module kind and in total, at a tiny config with every layer type, at
DeepSeek-V4-Flash's dimensions (DeepseekV4Config's defaults) and at V4-Pro's published ones (paper/models/)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations.config import Layout, stages
from symbolic.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "v4" / "config.json"
FLASH = ROOT / "paper" / "models" / "deepseek-v4-flash.json"
PRO = ROOT / "paper" / "models" / "deepseek-v4-pro.json"


def _memsym(*args, check=True):
    return subprocess.run([sys.executable, "-m", "memsym", *args], capture_output=True, text=True, cwd=ROOT,
                          check=check)


def _params(path, *extra):
    return json.loads(_memsym("params", "--model", str(path), "--json", *extra).stdout)


def _meta(data: dict):
    """transformers' DeepseekV4ForCausalLM of ``data`` on the meta device: (every parameter, the routing biases
    (buffers a checkpoint stores), {module kind: parameters}) counted from its modules' names."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    conf = transformers.DeepseekV4Config(**{k: v for k, v in data.items() if not k.startswith("_")})
    with torch.device("meta"):
        model = transformers.DeepseekV4ForCausalLM(conf)
    kinds = {"attn": {}, "CSA": {}, "HCA": {}, "hc": {}}
    for i, layer in enumerate(model.model.layers):
        kind = conf.layer_types[i]
        for n, p in layer.self_attn.named_parameters():
            key = "attn" if not n.startswith("compressor.") else \
                ("CSA" if kind == "compressed_sparse_attention" else "HCA")
            kinds[key][i] = kinds[key].get(i, 0) + p.numel()
        kinds["hc"][i] = sum(p.numel() for m in (layer.attn_hc, layer.ffn_hc) for p in m.parameters())
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    head = sum(p.numel() for p in model.model.hc_head.parameters())
    return sum(p.numel() for p in model.parameters()), bias, kinds, head, conf


@pytest.mark.parametrize("path", [TINY, FLASH, PRO], ids=["tiny", "v4-flash", "v4-pro"])
def test_parameters_equal_transformers_model_on_the_meta_device(path):
    data = json.loads(path.read_text())
    total, bias, kinds, hc_head, conf = _meta(data)
    paper, ckpt = _params(path), _params(path, "--accounting", "checkpoint")
    assert ckpt["total"] == total + bias  # every parameter, and the learned routers' score-correction biases
    assert paper["total"] + conf.hidden_size == total  # the paper's accounting leaves out the final RMSNorm
    assert ckpt["checkpoint_only"] == {"final_norm": conf.hidden_size, "router_bias": bias}
    per = paper["per_layer"]
    assert set(kinds["attn"].values()) == {per["attn"]}
    assert set(kinds["CSA"].values()) == ({per["csa"]} if kinds["CSA"] else set())
    assert set(kinds["HCA"].values()) == ({per["hca"]} if kinds["HCA"] else set())
    assert set(kinds["hc"].values()) == {per["hc"]} and per["hc_head"] == hc_head
    assert "dense_layer" not in per
    layer_types = conf.layer_types
    assert paper["layer_kinds"] == {"dense": 0, "moe": conf.num_hidden_layers,
                                    "CSA": layer_types.count("compressed_sparse_attention"),
                                    "HCA": layer_types.count("heavily_compressed_attention"),
                                    "learned-router": conf.mlp_layer_types.count("moe")}


def test_the_released_totals_are_the_published_sizes():
    """DeepSeek-V4-Flash about 284B, V4-Pro about 1.6T parameters (the releases' model cards; MTP not counted)."""
    flash, pro = _params(FLASH)["total"], _params(PRO)["total"]
    assert round(flash / 1e9) == 284
    assert round(pro / 1e11) == 16


def test_stage_counts_sum_to_the_model():
    """Each pipeline stage counts its CSA, HCA and learned-router layers (L_C, L_H, L_R); over the stages they are
    the model's."""
    model = cfg.load_model(str(FLASH))
    for pp in (1, 4, 16, 43):
        parts = stages(model, Layout(pp=pp))
        counts = [dict(c.extra) for c in parts]
        assert sum(c["L_C"] for c in counts) == model.attention.count("csa")
        assert sum(c["L_H"] for c in counts) == model.attention.count("hca")
        assert sum(c["L_R"] for c in counts) == model.hashed.count(False)
        for c, comp in zip(counts, parts):
            assert c["L_C"] + c["L_H"] <= comp.moe == len(comp.layers)


def test_defaults_are_deepseekv4configs():
    """A config giving only its model_type reads as DeepseekV4Config's defaults (V4-Flash)."""
    bare = cfg.hfconfig.from_dict({"model_type": "deepseek_v4"})
    flash = cfg.load_model(str(FLASH))
    for k in ("h", "l", "n_h", "d_a", "d_cq", "g_O", "d_O", "N", "N_r", "h_E", "v", "n_hc", "t_S", "w", "n_I", "d_I",
              "k_I", "d_hr", "m_C", "m_H", "attention", "hashed"):
        assert getattr(bare, k) == getattr(flash, k), k
    assert (bare.d_hr, bare.m_C, bare.m_H) == (64, 4, 128)


@pytest.mark.parametrize("change,field", [
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"n_shared_experts": 2}, "n_shared_experts"),
    ({"o_groups": 3}, "o_groups"),
    ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
    ({"layer_types": ["full_attention"] * 4}, "layer_types"),
    ({"mlp_layer_types": ["dense"] * 4}, "mlp_layer_types"),
    ({"compress_rates": {"compressed_sparse_attention": 0}}, "compress_rates"),
    ({"compress_rates": {"sliding_attention": 4}}, "compress_rates"),
    ({"scoring_func": "relu"}, "scoring_func"),
    ({"attention_bias": True}, "attention_bias"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ({"hc_mult": 0}, "hc_mult"),
    ({"partial_rotary_factor": 1.5}, "partial_rotary_factor"),
    # found in review: unhashable entries, a rate missing for a type a layer uses, a float head count
    ({"layer_types": [["sliding_attention"]] * 4}, "layer_types"),
    ({"layer_types": [{"a": 1}] * 4}, "layer_types"),
    ({"mlp_layer_types": [["moe"]] * 4}, "mlp_layer_types"),
    ({"compress_rates": {"compressed_sparse_attention": 8}}, "compress_rates"),
    ({"num_key_value_heads": 1.0}, "num_key_value_heads"),
])
def test_what_a_v4_config_must_hold(tmp_path, change, field):
    data = {**json.loads(TINY.read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as exc:
        cfg.load_model(str(path))
    assert field in str(exc.value)


def test_unhashable_legacy_ratios_are_refused():
    data = {k: v for k, v in json.loads(TINY.read_text()).items() if k != "layer_types"}
    with pytest.raises(ConfigError, match="compress_ratios"):
        cfg.hfconfig.from_dict({**data, "compress_ratios": [[0], 4, 128, 4]})


def test_legacy_fields_read_as_transformers_folds_them():
    """compress_ratios (0/4/128 per layer), num_hash_layers and qk_rope_head_dim: DeepseekV4Config.__post_init__'s
    legacy fields."""
    data = {k: v for k, v in json.loads(TINY.read_text()).items()
            if k not in ("layer_types", "mlp_layer_types", "partial_rotary_factor", "compress_rates")}
    data.update(compress_ratios=[0, 4, 128, 4], num_hash_layers=1, qk_rope_head_dim=8)
    spec = cfg.hfconfig.from_dict(data)
    assert spec.attention == ("sliding", "csa", "hca", "csa") and spec.hashed == (True, False, False, False)
    assert (spec.d_hr, spec.m_C, spec.m_H) == (8, 4, 128)


@pytest.mark.parametrize("command", [
    ["trace", "--framework", "mcore", "--mbs", "1", "--seq", "64"],
    ["trace", "--framework", "transformers", "--mbs", "1", "--seq", "64", "--fake"],
    ["trace", "--framework", "transformers", "--mbs", "1", "--seq", "64", "--step"],
    ["compare", "--pp", "1"],
    ["search", "--gpus", "8", "--gpu", "h800"],
    # options that would change none of its tensors, only rename its terms (found in review)
    ["estimate", "--pp", "1", "--fp8-activations"],
    ["estimate", "--pp", "1", "--recompute", "custom:latent,score"],
    ["params", "--mtp"],
    ["trace", "--framework", "transformers", "--mbs", "1", "--seq", "64", "--attention", "sdpa"],
])
def test_what_is_not_covered_is_refused_on_one_line(command):
    """Megatron-Core has no V4 model; the fake routing, the step's moments, other tools' estimators and the search
    (checked against estimate) are the DeepSeek family's; FP8 caching and recomputing MLA operators change no V4
    tensor; its MTP module is not modelled; transformers runs it eager only: each command exits 2 with one line
    saying so."""
    out = _memsym(*command, "--model", str(TINY), check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "deepseek_v4" in out.stderr or "DeepSeek-V4" in out.stderr


def test_every_layer_type_has_its_own_activations():
    """estimate's per-layer split: a sliding layer holds the attention and MoE sublayers, a CSA (HCA) layer adds its
    compressor and keys (act.csa.layer, act.hca.layer), exactly the kinds' terms; their sum and what is outside the
    layers are the stage's activations."""
    data = json.loads(_memsym("estimate", "--model", str(TINY), "--pp", "1", "--tp", "1", "--ep", "1", "--dp", "1",
                              "--mbs", "2", "--seq", "64", "--json").stdout)
    rows = data["bytes"]["activations_by_layer"]
    spec = cfg.load_model(str(TINY))
    by_type = {}
    for r, a in zip(rows, spec.attention):
        by_type.setdefault(a, set()).add(r["bytes"])
    assert all(len(v) == 1 for v in by_type.values()) and len(by_type) == 3
    sliding, csa, hca = (by_type[k].pop() for k in ("sliding", "csa", "hca"))
    assert csa > sliding and hca > sliding
    assert sum(r["bytes"] for r in rows) + data["bytes"]["activations_outside_layers"] == data["bytes"]["activations"]


def test_fit_and_sensitivity_answer_for_v4():
    """fit's integer answer (the exact evaluators) and its checks; sensitivity's derivative in s reads the compressed
    entries floor(s / m) at their average slope."""
    fit = _memsym("fit", "--model", str(FLASH), "--gpu", "h800", "--solve", "seq", "--recompute", "full").stdout
    assert "check (exact)" in fit and "fits" in fit and "does not fit" in fit
    sens = _memsym("sensitivity", "--model", str(FLASH), "--wrt", "s").stdout
    assert "d/ds" in sens and "/m_C" in sens.replace(" ", "")  # the compressed entries at their slope, 1 / m_C
