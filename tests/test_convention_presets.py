"""The conventions presets as data (derivations/config/convention_presets/*.toml, read by
derivations/config/switches.py: read_presets): complete, checked, and naming terms explicitly."""
from __future__ import annotations

import shutil

import pytest

from derivations import config as cfg
from derivations.activations import View
from derivations.activations.naming import activation_ids
from derivations.activations.view import naming_conventions
from derivations.config.switches import PRESET_DIR, read_presets, with_preset

#: The term ids of one MoE layer and of the peak under each preset at the default training: pinned
#: here by hand (an id is an API: JSON consumers and the report's cross-references read it).
PINNED = {
    "paper": ("act.layer", "act.peak"),
    "megatron": ("act.layer.megatron", "act.peak.megatron"),
    "modelzoo": ("act.layer.modelzoo", "act.peak.modelzoo"),
    "transformers": ("act.layer.transformers", "act.peak.transformers"),
    "mcore": ("act.layer.mcore", "act.peak.mcore"),
    "mcore-te": ("act.layer.mcore-te", "act.peak.mcore-te"),
    "torchtitan": ("act.layer.torchtitan", "act.peak.torchtitan"),
}


def _ids():
    out = {}
    for name in cfg.CONVENTION_PRESETS:
        ids = activation_ids(View.of(with_preset(cfg.Training(), name)))
        out[name] = (ids["layer"], ids["peak"])
    return out


def test_every_preset_is_a_file_setting_every_switch():
    names = sorted(p.stem for p in PRESET_DIR.glob("*.toml") if p.stem != "kernels")
    assert names == sorted(["paper", "megatron", "modelzoo", "transformers", "mcore", "mcore-te", "torchtitan"])
    assert list(cfg.CONVENTION_PRESETS) == ["paper", "megatron", "modelzoo", "transformers", "mcore", "mcore-te",
                                            "torchtitan"]
    for name, p in cfg.CONVENTION_PRESETS.items():
        assert set(cfg.CONVENTION_SWITCHES) | {"attention", "bytes_per_param"} <= set(p), name
        assert cfg.CONVENTION_SOURCES[name].strip(), name
    assert cfg.CONVENTION_PRESETS["paper"] == dict({k: s.default for k, s in cfg.CONVENTION_SWITCHES.items()},
                                                   attention="eager", bytes_per_param="paper", mtp=False)


def test_term_ids_are_pinned():
    assert _ids() == PINNED


def test_a_preset_added_without_names_terms_renames_nothing(tmp_path):
    """The hazard this guards: a framework's preset with Megatron's activation switches renamed
    act.layer.megatron to a long switch suffix when ids came from the set of presets."""
    folder = tmp_path / "p"
    shutil.copytree(PRESET_DIR, folder)
    text = (folder / "megatron.toml").read_text()
    (folder / "other.toml").write_text(text.replace('name = "megatron"', 'name = "other"')
                                            .replace("order = 2", "order = 9").replace("names_terms = true",
                                                                                       "names_terms = false"))
    presets, sources, naming, kernels = read_presets(folder)
    assert "other" in presets and naming == cfg.NAMING_PRESETS
    assert naming_conventions(presets, naming) == naming_conventions(cfg.CONVENTION_PRESETS, cfg.NAMING_PRESETS)
    (folder / "other.toml").write_text((folder / "other.toml").read_text()
                                            .replace("names_terms = false", "names_terms = true"))
    presets, _, naming, _ = read_presets(folder)
    with pytest.raises(ValueError, match="megatron and other keep the same activations"):
        naming_conventions(presets, naming)


@pytest.mark.parametrize("edit, message", [
    (("swiglu = \"fused\"", "swiglu = \"fusedd\""), "switch swiglu = 'fusedd'"),
    (("attention = \"flash\"", "attention = 1"), "switch attention = 1"),
    (("name = \"megatron\"", "name = \"other\""), "a preset has name"),
    (("[switches]", "extra = 1\n[switches]"), "a preset has name"),
    (("[switches]", "[switches]\nno_such_switch = \"x\""), "switch no_such_switch"),
])
def test_a_malformed_preset_file_is_refused_by_name(tmp_path, edit, message):
    folder = tmp_path / "p"
    shutil.copytree(PRESET_DIR, folder)
    path = folder / "megatron.toml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    with pytest.raises(ValueError, match=message) as err:
        read_presets(folder)
    assert "megatron.toml" in str(err.value)


def test_kernel_sets_are_data_and_mcore_te_is_mcore_with_te_kernels():
    from derivations.config.switches import KERNEL_OVERRIDES
    assert set(KERNEL_OVERRIDES) == {"local", "te"} and KERNEL_OVERRIDES["local"] == {}
    assert cfg.CONVENTION_PRESETS["mcore-te"] == dict(cfg.CONVENTION_PRESETS["mcore"], **KERNEL_OVERRIDES["te"])


def test_a_preset_missing_a_switch_is_refused(tmp_path):
    """A switch left out would silently fall back to the paper's choice."""
    folder = tmp_path / "p"
    shutil.copytree(PRESET_DIR, folder)
    path = folder / "mcore.toml"
    path.write_text(path.read_text().replace('swiglu = "fused"\n', ""))
    with pytest.raises(ValueError, match="mcore.toml: a preset sets every switch; missing swiglu"):
        read_presets(folder)
