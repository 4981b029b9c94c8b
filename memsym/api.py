"""The public Python API: the CLI's commands as functions, keywords read by their options' own definitions:
``estimate("deepseek-v3", zero=1)`` is ``memsym estimate --zero 1``, its ``to_dict()`` what ``--json`` prints.
Bad input raises :class:`symbolic.errors.ConfigError`."""
from __future__ import annotations

import copy
import importlib
import os
import json
from typing import Any, Dict, List

from html import escape

from derivations.config import DEFAULT_MODEL, load_model as load
from derivations.config.presets import checked
from symbolic.errors import ConfigError

from .commands.common import finish, json_default
from .commands.keywords import namespace


def _run(command: str, options: Dict[str, Any], positional: List[str] = ()) -> "Result":
    """The command's result for these keywords, resolved as the command line resolves them; the model set as the
    ModelSpec it stands for (the spec given is the spec evaluated)."""
    options = dict(options)
    model = options.pop("model", None)
    args = namespace(command, options, positional)
    args.json = True
    if model is not None:
        args.model = _spec(model)
    finish(args)
    return Result(command, importlib.import_module(f"memsym.commands.{command}").data(args))


def _spec(model):
    """The ModelSpec of ``model``: a spec, validated (presets.checked), or the preset or config.json a text names."""
    if isinstance(model, (str, os.PathLike)):
        return load(os.fspath(model))
    if isinstance(getattr(type(model), "family", None), str):  # a family's model spec (ModelSpec for DeepSeek)
        return checked(model)
    raise TypeError(f"model must be a preset name, a config.json path or a ModelSpec, got {type(model).__name__}")


class Result:
    """A command's result: attribute access into its JSON (``r.params.total``, ``r.bytes.optimizer``),
    ``r["key"]``, :meth:`to_dict` (equal to the command's ``--json``), and Jupyter rendering."""

    def __init__(self, command: str, data: Dict):
        self._command = command
        self._data = json.loads(json.dumps(data, default=json_default))  # exact numbers as the CLI writes them

    def to_dict(self) -> Dict:
        return json.loads(json.dumps(self._data))

    def __getitem__(self, key):
        return _wrap(self._command, self._data[key], key)

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __getattr__(self, name):
        # (a private or special name is not a field: copy and pickle see a plain object)
        data, command = self.__dict__.get("_data"), self.__dict__.get("_command", "memsym")
        if not name.startswith("_") and isinstance(data, dict) and name in data:
            return _wrap(command, data[name], name)
        raise AttributeError(f"{command} result has no field {name!r}"
                             + (f"; fields: {', '.join(data)}" if isinstance(data, dict) else ""))

    def __dir__(self):
        return list(self._data) if isinstance(self._data, dict) else []

    def __repr__(self) -> str:
        """The values, one per line (``print(r)``), as :meth:`_rows` lists them."""
        rows = list(self._rows())
        width = max((len(k) for k, _ in rows), default=0)
        return "\n".join([f"memsym {self._command} result"] + [f"  {k:<{width}}  {_shown(v)}" for k, v in rows])

    def _rows(self, limit: int = 12):
        """(field, value) of every scalar, one level into objects, and of the first ``limit`` items of lists."""
        for k, v in (self._data.items() if isinstance(self._data, dict) else ()):
            if isinstance(v, dict):
                for k2, v2 in v.items():
                    if not isinstance(v2, (dict, list)):
                        yield f"{k}.{k2}", v2
            elif isinstance(v, list):
                for i, item in enumerate(v[:limit]):
                    if isinstance(item, dict):
                        yield f"{k}[{i}]", ", ".join(f"{a}={b}" for a, b in item.items()
                                                      if not isinstance(b, (dict, list)))
                    else:
                        yield f"{k}[{i}]", item
                if len(v) > limit:
                    yield f"{k}[...]", f"{len(v) - limit} more (to_dict() has them all)"
            else:
                yield k, v

    def _repr_markdown_(self) -> str:
        lines = [f"**memsym {self._command}**", "", "| field | value |", "|---|---:|"]
        lines += [f"| `{k}` | {_shown(v)} |" for k, v in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{escape(str(k))}</code></td><td style='text-align:right'>"
                       f"{escape(_shown(v))}</td></tr>" for k, v in self._rows())
        return f"<table><caption>memsym {escape(self._command)}</caption>{rows}</table>"


def _shown(value) -> str:
    """A result's value as text: an integer with thousands separators."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


class Verdict(Result):
    """A verdict at the ends of the Sec. 6 range (``estimate(gpu=...).fits``): ``bool()`` when every end agrees, else
    it raises (ask ``.high`` or ``.low``); iterating gives the verdicts, not the ends' names."""

    def __bool__(self) -> bool:
        values = [bool(v) for v in self._data.values()]
        if all(values) or not any(values):
            return bool(values) and values[0]
        ends = ", ".join(f"{k} {'fits' if v else 'does not fit'}" for k, v in self._data.items())
        raise ValueError(f"the verdict is a range ({ends}): ask for one end, e.g. .high or .low")

    def __iter__(self):
        return iter(list(self._data.values()))

    def __eq__(self, other):
        if isinstance(other, bool):
            return bool(self) == other
        if isinstance(other, Verdict):
            return self._data == other._data
        return NotImplemented

    __hash__ = None


#: Result fields that are verdicts over a range (a dict of booleans).
VERDICTS = ("fits",)


def _wrap(command, value, name=None):
    if isinstance(value, dict):
        if name in VERDICTS and value and all(isinstance(v, bool) for v in value.values()):
            return Verdict(command, value)
        return Result(command, value)
    if isinstance(value, list):
        return [_wrap(command, v) for v in value]
    return value


def estimate(model=None, **options) -> Result:
    """``memsym estimate``: per-device parameters and bytes of one stage (Tables 6, 8, 10)."""
    return _run("estimate", dict(options, model=model))


def params(model=None, **options) -> Result:
    """``memsym params``: parameters per layer kind, per stage and in total (Tables 3-4)."""
    return _run("params", dict(options, model=model))


def fit(model=None, *, hbm: str = None, **options) -> Result:
    """``memsym fit``: the largest micro-batch (``solve="mbs"``) or sequence (``"seq"``) that fits ``hbm``."""
    return _run("fit", dict(options, model=model, hbm=hbm))


def search(model=None, *, gpus: int, hbm: str = None, **options) -> Result:
    """``memsym search``: every valid layout of ``gpus`` GPUs, and those that fit ``hbm``."""
    return _run("search", dict(options, model=model, gpus=gpus, hbm=hbm))


def sensitivity(model=None, *, wrt: str = None, **options) -> Result:
    """``memsym sensitivity``: derivatives, elasticities and finite differences by ``wrt``."""
    return _run("sensitivity", dict(options, model=model, wrt=wrt))


def compare(model=None, **options) -> Result:
    """``memsym compare``: the paper, Megatron-LM and ModelZoo conventions with the waterfall between them."""
    return _run("compare", dict(options, model=model))


def verify(formula: str, against: str, model=None, **options) -> Result:
    """``memsym verify``: is ``formula`` equal to the term ``against`` (``assume="TP=2 SP=2"``)?"""
    assume = options.pop("assume", None)
    if isinstance(assume, dict):
        assume = [f"{k}={v}" for k, v in assume.items()]
    elif isinstance(assume, str):
        assume = assume.split()
    return _run("verify", dict(options, model=model, against=against, assume=assume or None), [formula])


def terms(model=None):
    """Every base term of ``model`` (a frozen registry: id -> :class:`symbolic.term.Term`)."""
    from derivations import build
    return build(model if hasattr(model, "structure") else load_model(model))


def load_model(name_or_path: str = None):
    """A model preset by name or a Hugging Face ``config.json`` (read as data); a copy, so the preset stays as is."""
    return copy.copy(load(name_or_path or DEFAULT_MODEL))


__all__ = ["Result", "Verdict", "estimate", "params", "fit", "search", "sensitivity", "compare", "verify", "terms",
           "load_model", "ConfigError"]
