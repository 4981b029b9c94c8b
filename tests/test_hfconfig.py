"""derivations.hfconfig: a Hugging Face config.json (JSON data only) -> ModelSpec, with clear errors."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp

from derivations import config as cfg
from derivations.config import hfconfig
from memsym.cli import main
from derivations.notation import d_c, d_cq, d_h, d_hr, d_v, h, n_h

DATA = Path(__file__).parent / "data"
SMALL = json.loads((DATA / "variants" / "small.json").read_text())


def same_model(a, b):
    strip = lambda m: dataclasses.replace(m, name="", source="")
    return strip(a) == strip(b)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2", "deepseek-v2-lite"])
def test_released_configs_map_onto_the_presets(name):
    m = cfg.load_model(str(DATA / name / "config.json"))
    assert same_model(m, cfg.PRESETS[name])
    assert m.name == name                       # a released config is called by the preset it equals
    assert m.source.endswith("config.json")


def test_a_directory_means_its_config_json():
    m = cfg.load_model(str(DATA / "deepseek-v2-lite"))
    assert same_model(m, cfg.PRESETS["deepseek-v2-lite"]) and m.name == "deepseek-v2-lite"


def test_field_mapping_of_v3():
    m = hfconfig.read_config(str(DATA / "deepseek-v3" / "config.json")).model
    raw = json.loads((DATA / "deepseek-v3" / "config.json").read_text())
    assert (m.h, m.h_F, m.h_E, m.l, m.n_h) == (raw["hidden_size"], raw["intermediate_size"],
                                               raw["moe_intermediate_size"], raw["num_hidden_layers"],
                                               raw["num_attention_heads"])
    assert (m.d_cq, m.d_c, m.d_h, m.d_hr, m.d_v) == (raw["q_lora_rank"], raw["kv_lora_rank"], raw["qk_nope_head_dim"],
                                                    raw["qk_rope_head_dim"], raw["v_head_dim"])
    assert (m.N, m.N_s, m.N_r, m.v) == (raw["n_routed_experts"], raw["n_shared_experts"], raw["num_experts_per_tok"],
                                        raw["vocab_size"])
    assert m.routing_bias and m.mtp_layers == 1 and m.fp8_block == (128, 128) and not m.tie_word_embeddings


def test_q_lora_null_gives_one_query_matrix_and_no_query_norm():
    from derivations import build
    m = hfconfig.read_config(str(DATA / "variants" / "q_lora_null.json")).model
    assert m.d_cq is None and not m.q_lora
    t = build(m)
    shapes = {p.key: sp.Mul(*p.num) for p in t["params.mla"].parts}
    assert shapes["W_Q"] == n_h * (d_h + d_hr) * h and "W_DQ" not in shapes
    assert d_cq not in t["params.norm"].expr.free_symbols
    assert d_cq not in t["act.mla.layer"].expr.free_symbols


def test_value_head_dim_is_its_own_symbol():
    """v_head_dim may differ from qk_nope_head_dim: W^UV, W^O, v and the attention output use d_v."""
    from derivations import build
    m = hfconfig.read_config(str(DATA / "variants" / "v_head_dim_96.json")).model
    assert (m.d_h, m.d_v) == (64, 96)
    t = build(m)
    shapes = {p.key: sp.Mul(*p.num) for p in t["params.mla"].parts}
    assert shapes["W_UV"] == d_v * n_h * d_c and shapes["W_O"] == h * d_v * n_h
    assert shapes["W_UK"] == d_h * n_h * d_c
    act = t["act.mla.layer"]
    assert d_v in act.part("v").expr.free_symbols and d_v in act.part("attn_out").expr.free_symbols


def test_shared_experts_and_moe_layer_frequency():
    two = hfconfig.read_config(str(DATA / "variants" / "two_shared_experts.json")).model
    assert two.N_s == 2
    freq = hfconfig.read_config(str(DATA / "variants" / "moe_layer_freq_2.json")).model
    assert freq.moe_layer_freq == 2
    # HF rule: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0
    assert freq.layer_kinds() == ["dense", "dense", "moe", "dense", "moe", "dense", "moe", "dense", "moe"]


def test_optional_fields_take_the_hf_defaults(tmp_path):
    data = {k: v for k, v in SMALL.items()
            if k not in ("moe_layer_freq", "topk_method", "tie_word_embeddings", "num_nextn_predict_layers",
                         "n_shared_experts")}
    m = hfconfig.from_dict(data)
    assert (m.moe_layer_freq, m.tie_word_embeddings, m.mtp_layers, m.N_s) == (1, False, 0, 0)
    assert m.topk_method == "noaux_tc"                      # DeepseekV3Config's default
    assert hfconfig.from_dict(dict(data, model_type="deepseek_v2")).topk_method == "greedy"
    assert hfconfig.from_dict(dict(SMALL, n_shared_experts=None)).N_s == 0


@pytest.mark.parametrize("fname, field", [
    ("missing_hidden_size.json", "hidden_size"),
    ("bool_num_hidden_layers.json", "num_hidden_layers"),
    ("string_num_attention_heads.json", "num_attention_heads"),
    ("zero_kv_lora_rank.json", "kv_lora_rank"),
    ("llama.json", "model_type"),
    ("truncated.json", "json"),
])
def test_malformed_files_name_the_field(fname, field):
    path = str(DATA / "malformed" / fname)
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.load_model(path)
    assert exc.value.constraint == f"hf-config.{field}"
    msg = str(exc.value)
    assert path in msg and "\n" not in msg
    if field != "json":
        assert repr(field) in msg or field in msg


REQUIRED = ["model_type", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
            "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
            "v_head_dim", "n_routed_experts", "num_experts_per_tok", "first_k_dense_replace", "vocab_size"]


@pytest.mark.parametrize("field", REQUIRED)
def test_every_required_field_is_required(field):
    with pytest.raises(cfg.ConfigError, match=field) as exc:
        hfconfig.from_dict({k: v for k, v in SMALL.items() if k != field}, "x.json")
    assert exc.value.constraint == f"hf-config.{field}"


INTS = [f for f in REQUIRED if f != "model_type"] + ["moe_layer_freq", "num_nextn_predict_layers", "n_shared_experts"]


@pytest.mark.parametrize("field", INTS)
@pytest.mark.parametrize("bad", [True, 64.0, "64", [64], -1])
def test_wrong_types_and_negative_values_name_the_field(field, bad):
    with pytest.raises(cfg.ConfigError, match=field) as exc:
        hfconfig.from_dict(dict(SMALL, **{field: bad}), "x.json")
    assert exc.value.constraint == f"hf-config.{field}"


@pytest.mark.parametrize("field, bad", [
    ("hidden_size", 0), ("num_hidden_layers", 0), ("n_routed_experts", 0), ("num_experts_per_tok", 0),
    ("q_lora_rank", 0), ("moe_layer_freq", 0),
    ("num_experts_per_tok", 17),                         # more than n_routed_experts = 16
    ("first_k_dense_replace", 10),                       # more than num_hidden_layers = 9
    ("topk_method", "best"), ("topk_method", 3), ("tie_word_embeddings", "false"), ("tie_word_embeddings", 0),
    ("attention_bias", True), ("model_type", "mixtral"), ("model_type", 3),
    ("quantization_config", {"quant_method": "fp8", "weight_block_size": [128]}),
])
def test_invalid_values_name_the_field(field, bad):
    with pytest.raises(cfg.ConfigError, match=field) as exc:
        hfconfig.from_dict(dict(SMALL, **{field: bad}), "x.json")
    assert exc.value.constraint == f"hf-config.{field}"


def test_zero_is_allowed_where_it_means_none():
    m = hfconfig.from_dict(dict(SMALL, first_k_dense_replace=0, num_nextn_predict_layers=0, n_shared_experts=0))
    assert (m.first_k_dense, m.mtp_layers, m.N_s) == (0, 0, 0)
    assert m.layer_kinds() == ["moe"] * m.l


@pytest.mark.parametrize("content, word", [(b"[1, 2]", "object"), (b"\xff\xfe{}", "UTF-8"), (b"", "JSON"),
                                           (b'{"model_type": "deepseek_v3",', "JSON")])
def test_files_that_are_not_a_json_object(tmp_path, content, word):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(cfg.ConfigError, match=word) as exc:
        cfg.load_model(str(p))
    assert str(p) in str(exc.value)


def test_missing_file_and_directory_without_config(tmp_path):
    with pytest.raises(cfg.ConfigError, match="cannot read"):
        cfg.load_model(str(tmp_path / "nope.json"))
    with pytest.raises(cfg.ConfigError, match="config.json"):
        cfg.load_model(str(tmp_path))


def test_config_is_data_never_code(tmp_path):
    """auto_map points at remote code: memsym reads the numbers and never imports or runs it."""
    marker = tmp_path / "ran"
    (tmp_path / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (tmp_path / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    data = dict(SMALL, auto_map={"AutoConfig": "configuration_evil.Config",
                                 "AutoModelForCausalLM": "modeling_evil.Model"})
    (tmp_path / "config.json").write_text(json.dumps(data))
    sys.path.insert(0, str(tmp_path))
    try:
        m = cfg.load_model(str(tmp_path / "config.json"))
    finally:
        sys.path.remove(str(tmp_path))
    assert m.h == SMALL["hidden_size"]
    assert not marker.exists()
    assert "configuration_evil" not in sys.modules and "modeling_evil" not in sys.modules


@pytest.mark.parametrize("fname", ["missing_hidden_size.json", "bool_num_hidden_layers.json", "truncated.json",
                                   "llama.json"])
@pytest.mark.parametrize("command", ["params", "estimate", "terms"])
def test_cli_exits_2_with_one_line(capsys, fname, command):
    assert main([command, "--model", str(DATA / "malformed" / fname)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and fname in err


def test_cli_bad_config_in_a_subprocess_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "memsym", "params", "--model",
                        str(DATA / "malformed" / "string_num_attention_heads.json")],
                       capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "num_attention_heads" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("value", [4, 1, 32, "16", 16.0])
def test_num_key_value_heads_other_than_the_heads_is_refused(tmp_path, value):
    """issue 43 item 5: num_key_value_heads != num_attention_heads was accepted without a word (transformers'
    eager attention repeats MLA's keys and values by their ratio); equal to the heads, or absent, it is read."""
    import json

    from derivations.config.presets import preset_path
    data = json.loads(open(preset_path("deepseek-v2-lite")).read())
    data["num_key_value_heads"] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(cfg.ConfigError, match="num_key_value_heads"):
        cfg.load_model(str(path))
    data["num_key_value_heads"] = data["num_attention_heads"]
    path.write_text(json.dumps(data))
    assert cfg.load_model(str(path)).n_h == 16
