"""A Hugging Face ``config.json`` read as bounded data and handed to the family that reads its ``model_type``.

The file is read as JSON data only: nothing is imported, executed or downloaded
(``trust_remote_code`` never enters): at most CONFIG_BYTES bytes, bounded nesting and number
digits (symbolic/jsonfile.py).  :func:`from_dict` finds the family (derivations/families/) whose
``model_types`` hold the file's ``model_type`` and calls its ``config.from_fields`` with
:class:`Fields`, the checks of one field (types, ranges, the limits of derivations/config/limits.py);
the DeepSeek family's mapping onto the paper's notation (Table 1) is
derivations/families/deepseek/config.py.

Any problem raises :class:`~symbolic.errors.ConfigError` whose message names the file and
the field; the CLI prints it on one line and exits 2.

A family's released checkpoints are listed by its own module (DeepSeek's:
derivations/families/deepseek/checkpoint.py).
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

MAX_BYTES = CONFIG_BYTES  # a config.json is a few KiB; refuse to read anything absurd


def _err(path: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"hf-config.{field}", f"{path}: {message}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_type_name, _shown = jsonfile.type_name, jsonfile.shown


def _int(data: Mapping, path: str, field: str, meaning: str, minimum: int = 1, default=None, required=True):
    if field not in data:
        if required:
            raise _err(path, field, f"required field {field!r} ({meaning}) is missing")
        return default
    x = data[field]
    if not _is_int(x):
        raise _err(path, field, f"field {field!r} ({meaning}) must be an integer, got {_type_name(x)} {_shown(x)}")
    if x < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise _err(path, field, f"field {field!r} ({meaning}) must be {kind}, got {_shown(x)}")
    lim = FIELDS.get(field)
    if lim is not None and x > lim.high:
        raise _err(path, field, f"field {field!r} ({meaning}) must be at most {lim.domain.split('..')[1]} "
                                f"({lim.why}), got {_shown(x)}")
    return x


#: How much a config.json may hold (derivations/config/limits.py), for the bounded reader.
BOUNDS = jsonfile.Bounds(CONFIG_BYTES, CONFIG_DEPTH, CONFIG_DIGITS)


def _read_bounded(path: str) -> bytes:
    """At most CONFIG_BYTES bytes of the regular file ``path`` (symbolic/jsonfile.py: read_bounded)."""
    return jsonfile.read_bounded(path, BOUNDS, _err)


def read_json(path: str) -> Dict:
    """The parsed JSON object of ``path`` (a config.json, or a directory holding one), read as bounded
    data (symbolic/jsonfile.py: at most CONFIG_BYTES bytes, nesting at most CONFIG_DEPTH, numbers of at
    most CONFIG_DIGITS digits, no field twice); every error names the file and the byte offset or field."""
    return _parse_json(*_read_raw(path))


def _read_raw(path) -> Tuple[bytes, str]:
    return jsonfile.read_raw(path, BOUNDS, _err)


def _parse_json(raw: bytes, path: str) -> Dict:
    return jsonfile.parse(raw, path, BOUNDS, _err)


class Fields:
    """The fields of one parsed config.json, each checked as it is read (what a family's reader is handed:
    derivations/families/<family>/config.py ``from_fields``); every error names the file and the field."""

    type_name, shown = staticmethod(_type_name), staticmethod(_shown)

    def __init__(self, data: Mapping, path: str):
        self.data, self.path = data, path

    def err(self, field: str, message: str) -> ConfigError:
        return _err(self.path, field, message)

    def int(self, field: str, meaning: str, minimum: int = 1, default=None, required=True):
        """The integer ``field`` (at least ``minimum``, at most its limit in derivations/config/limits.py)."""
        return _int(self.data, self.path, field, meaning, minimum, default, required)

    def fp8_block(self) -> Optional[Tuple[int, int]]:
        """quantization_config.weight_block_size of an FP8 block-quantised release, or None."""
        return _fp8_block(self.data, self.path)


def covered() -> str:
    """Each family's architecture and the model_types it reads (what an unread model_type is told)."""
    return "; ".join(f"{f.short}: {', '.join(f.model_types + tuple(f'{mt} ({field})' for mt, field, _ in f.wrappers))}"
                     for f in families.all())


def from_dict(data: Mapping, path: str = "<config>", name: Optional[str] = None,
              source: Optional[str] = None):
    """Map a parsed config.json onto the model of the family that reads its ``model_type``
    (derivations/families/<family>/config.py ``from_fields``), validating every field it uses.

    ``source`` (default ``path``) records where the model came from (``"preset"`` for the
    presets of :mod:`derivations.config.presets`)."""
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
    from_dict(consulted)
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


def _fp8_block(data: Mapping, path: str) -> Optional[Tuple[int, int]]:
    q = data.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise _err(path, "quantization_config", f"field 'quantization_config' must be an object, got {_type_name(q)}")
    if q.get("quant_method") != "fp8" or q.get("weight_block_size") is None:
        return None
    blk = q["weight_block_size"]
    if not (isinstance(blk, list) and len(blk) == 2
            and all(_is_int(x) and 0 < x <= FIELDS['weight_block_size'].high for x in blk)):
        raise _err(path, "quantization_config", f"quantization_config.weight_block_size must be two positive "
                                                f"integers (at most {FIELDS['weight_block_size'].high}), got "
                                                f"{_shown(blk)}")
    return (blk[0], blk[1])


@dataclass(frozen=True)
class ConfigFile:
    """A config.json read once: the path as given, the bytes read (bounded: :func:`_read_bounded`),
    the parsed object (:func:`read_json`) and the :class:`ModelSpec` built from it (:func:`from_dict`)."""

    path: str
    raw: bytes
    data: Mapping
    model: ModelSpec

    @property
    def sha256(self) -> str:
        """SHA-256 of the bytes read (what a trace record keeps: memsym/trace/records.py)."""
        return hashlib.sha256(self.raw).hexdigest()


def read_config(path: str, name: Optional[str] = None, source: Optional[str] = None) -> ConfigFile:
    """A Hugging Face config.json (or a directory holding one) read and validated: what
    :func:`from_hf_config` builds, with the bytes and the parsed object it was built from."""
    raw, file = _read_raw(path)
    data = _parse_json(raw, file)
    return ConfigFile(str(path), raw, data, from_dict(data, path, name, source))


def from_hf_config(path: str) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face config.json (or a directory holding one)."""
    return read_config(path).model
