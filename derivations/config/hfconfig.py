"""A Hugging Face ``config.json`` read as bounded JSON data (symbolic/jsonfile.py; nothing imported, executed or
downloaded), handed to the family of its ``model_type`` with :class:`Fields`, the checks of one field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from symbolic import jsonfile
from symbolic.errors import ConfigError

from derivations.config.limits import CONFIG_BYTES, CONFIG_DEPTH, CONFIG_DIGITS, FIELDS
from derivations.config.model import ModelSpec
from derivations import families
import hashlib


def _err(path: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"hf-config.{field}", f"{path}: {message}")


_type_name, _shown = jsonfile.type_name, jsonfile.shown
#: How much a config.json may hold (derivations/config/limits.py), for the bounded reader.
BOUNDS = jsonfile.Bounds(CONFIG_BYTES, CONFIG_DEPTH, CONFIG_DIGITS)


def read_json(path: str) -> Dict:
    """The parsed JSON object of ``path`` (a config.json, or a directory holding one), read as bounded data."""
    return jsonfile.parse(*jsonfile.read_raw(path, BOUNDS, _err), BOUNDS, _err)


class Fields:
    """The fields of one parsed config.json, each checked as a family's ``from_fields`` reads it."""

    type_name, shown = staticmethod(_type_name), staticmethod(_shown)

    def __init__(self, data: Mapping, path: str):
        self.data, self.path = data, path

    def err(self, field: str, message: str) -> ConfigError:
        return _err(self.path, field, message)

    def int(self, field: str, meaning: str, minimum: int = 1, default=None, required=True):
        """The integer ``field`` (at least ``minimum``, at most its limit in derivations/config/limits.py)."""
        if field not in self.data:
            if required:
                raise self.err(field, f"required field {field!r} ({meaning}) is missing")
            return default
        x = self.data[field]
        if not isinstance(x, int) or isinstance(x, bool):
            raise self.err(field, f"field {field!r} ({meaning}) must be an integer, got {_type_name(x)} {_shown(x)}")
        if x < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.err(field, f"field {field!r} ({meaning}) must be {kind}, got {_shown(x)}")
        lim = FIELDS.get(field)
        if lim is not None and x > lim.high:
            raise self.err(field, f"field {field!r} ({meaning}) must be at most {lim.domain.split('..')[1]} "
                                  f"({lim.why}), got {_shown(x)}")
        return x

    def choice(self, field: str, choices, default):
        """The text ``field``, one of ``choices`` (``default`` when absent)."""
        val = self.data.get(field, default)
        if not isinstance(val, str) or val not in choices:
            raise self.err(field, f"field {field!r} must be one of {', '.join(choices)}, "
                                  f"got {_type_name(val)} {_shown(val)}")
        return val

    def bool(self, field: str, default: bool = False) -> bool:
        """The true/false ``field`` (``default`` when absent)."""
        val = self.data.get(field, default)
        if not isinstance(val, bool):
            raise self.err(field, f"field {field!r} must be true or false, got {_type_name(val)} {_shown(val)}")
        return val

    def fp8_block(self) -> Optional[Tuple[int, int]]:
        """quantization_config.weight_block_size of an FP8 block-quantised release, or None."""
        q = self.data.get("quantization_config")
        if q is None:
            return None
        if not isinstance(q, dict):
            raise self.err("quantization_config", f"field 'quantization_config' must be an object, got "
                                                  f"{_type_name(q)}")
        if q.get("quant_method") != "fp8" or q.get("weight_block_size") is None:
            return None
        blk, high = q["weight_block_size"], FIELDS["weight_block_size"].high
        if not (isinstance(blk, list) and len(blk) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= high for x in blk)):
            raise self.err("quantization_config", f"quantization_config.weight_block_size must be two positive "
                                                  f"integers (at most {high}), got {_shown(blk)}")
        return (blk[0], blk[1])


def covered() -> str:
    """Each family's architecture and the model_types it reads (what an unread model_type is told)."""
    return "; ".join(f"{f.short}: {', '.join(f.model_types + tuple(f'{mt} ({field})' for mt, field, _ in f.wrappers))}"
                     for f in families.all())


def from_dict(data: Mapping, path: str = "<config>", name: Optional[str] = None,
              source: Optional[str] = None):
    """The model of a parsed config.json, read by the family of its ``model_type``, every field it uses validated."""
    mt = data.get("model_type")
    if mt is None:
        raise _err(path, "model_type", f"required field 'model_type' is missing (memsym covers "
                                       f"{', '.join(families.model_types())})")
    wrapped = families.wrapper(mt) if isinstance(mt, str) else None
    if wrapped is not None:  # a multimodal config: its language model is one field (Kimi K2.5's text_config)
        field, inner = wrapped
        text = data.get(field)
        if not isinstance(text, dict):
            raise _err(path, field, f"model_type {_shown(mt)}: field {field!r} (its language model) must be an "
                                    f"object, got {_type_name(text)}")
        data, path = {"model_type": inner, **text}, f"{path} {field}"
        mt = data["model_type"]
        if isinstance(mt, str) and families.wrapper(mt) is not None:
            raise _err(path, "model_type",
                       f"model_type {_shown(mt)} inside {field}: a wrapper in a wrapper is not read")
    family = families.for_model_type(mt) if isinstance(mt, str) else None
    if family is None:
        raise _err(path, "model_type", f"model_type {_shown(mt)} is not an architecture memsym covers "
                                       f"({covered()})")
    return family.read_config(Fields(data, path), name, source)


@dataclass(frozen=True)
class ConfigFile:
    """A config.json read once: the path as given, the bytes read, the parsed object and the model built from it."""

    path: str
    raw: bytes
    data: Mapping
    model: ModelSpec

    @property
    def sha256(self) -> str:
        """SHA-256 of the bytes read (what a trace record keeps: memsym/trace/records.py)."""
        return hashlib.sha256(self.raw).hexdigest()


def read_config(path: str, name: Optional[str] = None, source: Optional[str] = None) -> ConfigFile:
    """A Hugging Face config.json (or a directory holding one) read and validated, with its bytes and object."""
    raw, file = jsonfile.read_raw(path, BOUNDS, _err)
    data = jsonfile.parse(raw, file, BOUNDS, _err)
    return ConfigFile(str(path), raw, data, from_dict(data, path, name, source))
