"""derivations.presets: the model presets are released config.json files shipped as data,
read by the reader of a user's file, and equal the dimensions written out here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations.config import hfconfig
from derivations.config import presets

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent

COMMON = dict(source="preset", moe_layer_freq=1, tie_word_embeddings=False, d_c=512, d_h=128, d_hr=64, d_v=128)
#: DeepSeek-V2's routing (its config.json: softmax scores, no top-k normalisation)
V2 = dict(model_type="deepseek_v2", scoring_func="softmax", norm_topk_prob=False)
EXPECTED = {
    "deepseek-v3": cfg.ModelSpec(name="deepseek-v3", h=7168, h_F=18432, h_E=2048, l=61, n_h=128, d_cq=1536,
                                 N=256, N_s=1, N_r=8, v=129280, first_k_dense=3, topk_method="noaux_tc",
                                 mtp_layers=1, fp8_block=(128, 128), n_group=8, topk_group=4, **COMMON),
    "deepseek-v2": cfg.ModelSpec(name="deepseek-v2", h=5120, h_F=12288, h_E=1536, l=60, n_h=128, d_cq=1536,
                                 N=160, N_s=2, N_r=6, v=102400, first_k_dense=1, topk_method="group_limited_greedy",
                                 mtp_layers=0, fp8_block=None, n_group=8, topk_group=3, **V2, **COMMON),
    "deepseek-v2-lite": cfg.ModelSpec(name="deepseek-v2-lite", h=2048, h_F=10944, h_E=1408, l=27, n_h=16, d_cq=None,
                                      N=64, N_s=2, N_r=6, v=102400, first_k_dense=1, topk_method="greedy",
                                      mtp_layers=0, fp8_block=None, n_group=1, topk_group=1, **V2, **COMMON),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_preset_equals_the_released_dimensions(name):
    m = cfg.load_model(name)
    assert m == EXPECTED[name]
    assert (m.name, m.source) == (name, "preset")
    assert m is cfg.PRESETS[name] is cfg.load_model(name)  # read once


def test_v3_field_by_field():
    m = cfg.PRESETS["deepseek-v3"]
    assert (m.h, m.h_F, m.h_E, m.l, m.n_h, m.d_cq, m.d_c, m.d_h, m.d_hr, m.d_v) == \
        (7168, 18432, 2048, 61, 128, 1536, 512, 128, 64, 128)
    assert (m.N, m.N_s, m.N_r, m.v, m.first_k_dense, m.moe_layer_freq) == (256, 1, 8, 129280, 3, 1)
    assert (m.topk_method, m.tie_word_embeddings, m.mtp_layers, m.fp8_block) == ("noaux_tc", False, 1, (128, 128))


def test_presets_mapping_order_and_read_only():
    assert list(cfg.PRESETS) == ["deepseek-v3", "deepseek-v2", "deepseek-v2-lite"]
    assert ", ".join(cfg.PRESETS) == "deepseek-v3, deepseek-v2, deepseek-v2-lite"
    assert len(cfg.PRESETS) == 3 and "deepseek-v2" in cfg.PRESETS and "nope" not in cfg.PRESETS
    assert dict(cfg.PRESETS.items()) == EXPECTED
    with pytest.raises(KeyError):
        cfg.PRESETS["nope"]
    with pytest.raises(TypeError):
        cfg.PRESETS["mine"] = EXPECTED["deepseek-v3"]
    assert cfg.PRESETS is presets.PRESETS and cfg.load_model is presets.load_model


def test_presets_are_the_released_config_files():
    """The shipped files are the released configs (the copies the tests read)."""
    for name in EXPECTED:
        shipped = json.loads(Path(presets.preset_path(name)).read_text())
        assert shipped == json.loads((DATA / name / "config.json").read_text())
        assert hfconfig.from_dict(shipped, name=name, source="preset") == EXPECTED[name]


def test_presets_load_lazily():
    """Importing the configuration reads no preset file; asking for a model reads its file only."""
    code = ("import derivations.config as cfg, derivations.config.presets as p; "
            "assert p._read_preset.cache_info().currsize == 0; names = ', '.join(cfg.PRESETS); "
            "assert p._read_preset.cache_info().currsize == 0; cfg.PRESETS['deepseek-v2']; "
            "print(p._read_preset.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "1"


def test_unknown_model_lists_the_presets_in_order():
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.load_model("nope")
    assert str(exc.value).endswith("unknown model 'nope': use one of deepseek-v3, deepseek-v2, deepseek-v2-lite "
                                   "or a path to a Hugging Face config.json")


def test_config_has_no_import_cycle():
    """model <- hfconfig <- presets <- config: the reader imports none of the modules built on it."""
    import ast
    tree = ast.parse((ROOT / "derivations" / "config" / "hfconfig.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"derivations.config", "derivations.config.presets", "derivations.config.layout",
                           "derivations.config.training"}, imported


def test_package_data_ships_the_presets():
    """Every data file the repository tracks in a shipped folder matches pyproject's package-data (each folder is
    a package: setup.py), so a wheel holds it (.ci/wheel builds one and checks the same of its contents)."""
    import fnmatch
    import subprocess
    import tomllib
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "derivations", "memsym", "symbolic", "paper",
                              "templates"], capture_output=True, text=True, check=True).stdout.split()
    data = [f for f in tracked if not f.endswith(".py")]
    assert any(f.endswith("models/deepseek-v3.json") for f in data)
    assert [f for f in data if not any(fnmatch.fnmatch(Path(f).name, g) for g in globs)] == []
    for name in EXPECTED:
        assert Path(presets.preset_path(name)).is_file()