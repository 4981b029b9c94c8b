"""The model presets: released config.json files shipped as data (``derivations/models/<name>.json``), read on
first use, and :func:`load_model`."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Iterator

from symbolic.errors import ConfigError, did_you_mean

from derivations.config.hfconfig import ConfigFile, from_dict, read_config, read_json
from derivations.config.model import ModelSpec
from derivations import families

#: The preset names, in the order they are listed (the released Hugging Face configs, ``derivations/models/``).
PRESET_NAMES = ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite")
MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


def preset_path(name: str) -> str:
    """The config.json of preset ``name`` (``derivations/models/<name>.json``)."""
    return os.path.join(MODELS_DIR, f"{name}.json")


@lru_cache(maxsize=None)
def _read_preset(name: str) -> ModelSpec:
    return from_dict(read_json(preset_path(name)), preset_path(name), name, source="preset")


class _Presets(Mapping):
    """Read-only mapping preset name -> ModelSpec, loaded on first access, in PRESET_NAMES order."""

    def __getitem__(self, name: str) -> ModelSpec:
        if name not in PRESET_NAMES:
            raise KeyError(name)
        return _read_preset(name)

    def __contains__(self, name: object) -> bool:
        return name in PRESET_NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(PRESET_NAMES)

    def __len__(self) -> int:
        return len(PRESET_NAMES)

    def __repr__(self) -> str:
        return f"PRESETS({', '.join(PRESET_NAMES)})"


PRESETS: Mapping[str, ModelSpec] = _Presets()
#: The paper's model (Table 1), the default of every command and of the Python API.
DEFAULT_MODEL = "deepseek-v3"


def named(spec: ModelSpec) -> ModelSpec:
    """``spec`` under the name of the preset it equals (every dimension and structural fact), else as it is."""
    for name in PRESET_NAMES:
        p = PRESETS[name]
        if replace(spec, name=p.name, source=p.source) == p:
            return replace(spec, name=p.name)
    return spec


def load_model(name_or_path: str) -> ModelSpec:
    """A preset by name, or a Hugging Face ``config.json`` (read as JSON data only)."""
    return PRESETS[name_or_path] if name_or_path in PRESETS else load_config(name_or_path).model


def load_config(name_or_path: str) -> ConfigFile:
    """What :func:`load_model` reads, kept: the config.json's bytes, parsed object and ModelSpec."""
    if name_or_path in PRESETS:
        return read_config(preset_path(name_or_path), name_or_path, source="preset")
    if os.path.lexists(name_or_path) or name_or_path.endswith(".json"):  # lexists: a symlink loop is a file
        c = read_config(name_or_path)
        return replace(c, model=named(c.model))
    raise ConfigError("model", f"unknown model {name_or_path!r}{did_you_mean(name_or_path, PRESETS)}: use one of "
                               f"{', '.join(PRESETS)} or a path to a Hugging Face config.json")


def checked(spec: ModelSpec) -> ModelSpec:
    """A ModelSpec built or changed in Python, validated as a config.json's fields are, and named by what it is."""
    if not isinstance(spec.name, str) or not isinstance(spec.source, str):
        raise ConfigError("model", f"ModelSpec name and source must be text, got {spec.name!r}, {spec.source!r}")
    family = families.find(getattr(spec, "family", None))
    if family is None:
        raise ConfigError("model", f"not a model of a family memsym covers: {spec!r}")
    data = family.config_fields(spec)
    rebuilt = from_dict(data, "ModelSpec", spec.name, spec.source)
    if rebuilt != spec or family.config_fields(rebuilt) != data:
        raise ConfigError("model", f"ModelSpec fields are not those of a model memsym reads: {spec!r}")
    if spec.name in PRESETS and named(replace(spec, name="")).name != spec.name:
        return replace(spec, name=family.shape_name(spec.family, spec.named()), source="python")
    return spec
