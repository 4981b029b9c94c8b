"""Exact numbers from the generated evaluators (``derivations/generated/``, derivations/generate.py), without sympy:
each structure's terms and each activation-flag assignment's tables resolved once (:func:`resolve`) and evaluated in
integers and ``fractions.Fraction``, equal to :func:`symbolic.numeric.exact` of the sympy terms
(tests/test_evaluate.py). A substitution is a dict from a symbol's name to its exact value."""
from __future__ import annotations

import json
from fractions import Fraction
from functools import lru_cache
from importlib import import_module
from math import prod
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

GENERATED = Path(__file__).resolve().parent / "generated"
#: The family whose evaluators are committed in derivations/generated/ (another family's are generated in
#: memory and installed: derivations/generate.py ``install``).
FAMILY = "deepseek"
_INSTALLED: Dict[str, Tuple[Mapping, object]] = {}


def install(family: str, tables: Mapping, module) -> None:
    """The evaluators of ``family`` generated in memory ({file name: content}, the ``<family>.py`` module)."""
    _INSTALLED[family] = (dict(tables), module)
    for cached in (_json, _terms, _activations, _symbols):
        cached.cache_clear()
    _VALUES.clear()


@lru_cache(maxsize=None)
def _json(family: str):
    if family in _INSTALLED:
        return _INSTALLED[family][0][f"{family}.json"]
    return json.loads((GENERATED / f"{family}.json").read_bytes())


#: The node of a generated tree that chooses by a flag (symbolic/codegen.py ``CHOOSE``, ``merged``).
CHOOSE = "?"


def resolve(value, flags: Mapping[str, bool]):
    """A generated value with each ``['?', flag, set, not]`` resolved by ``flags``; null dict entries dropped."""
    if type(value) is list:
        if value and value[0] == CHOOSE:
            return resolve(value[2] if flags[value[1]] else value[3], flags)
        return [resolve(v, flags) for v in value]
    if type(value) is dict:
        return {k: v for k, v in ((k, resolve(v, flags)) for k, v in value.items()) if v is not None}
    return value


@lru_cache(maxsize=None)
def _terms(family: str, structure: Tuple[bool, ...]) -> Dict:
    """{term id: [[part key, [tags], tree, label], ...]} of one structure of a family (generated, resolved)."""
    data = _json(family)
    return resolve(data["terms"], dict(zip(data["flags"], structure)))


def _module(family: str = FAMILY):
    if family in _INSTALLED:
        return _INSTALLED[family][1]
    return import_module(f"derivations.generated.{family}")


# ----------------------------------------------------------------------------- substitutions
def derived(values: Mapping, family: str = FAMILY) -> Dict:
    """``values`` plus the derived symbols and non-polynomial factors (generated ``derived``)."""
    return _module(family).derived(dict(values))


def inflight(schedule: str, pp: int, index: int, microbatches: Optional[int], vpp: int):
    """[(which, in flight, part), ...] of device ``index`` (the schedules' formulas, generated)."""
    return _module().inflight(schedule, {"PP": pp, "i_s": index, "n_mb": microbatches, "VPP": vpp})


def device(mtp: bool, full: bool, holds: str, values: Mapping, family: str = FAMILY, options: bool = False) -> Dict:
    """``values`` plus the per-device assembly (device_terms.py, generated) of a variant."""
    return _module(family).device(mtp, full, holds, dict(values), options)


def step(framework: str, policy: str, values: Mapping, family: str = FAMILY) -> Dict[str, Fraction]:
    """{moment: bytes above one micro-batch's end of the forward} (derivations/assembly/step_terms.py, generated)."""
    mod = _module(family)
    return mod.step(framework, policy, {**dict.fromkeys(mod.STEP_INPUTS, 0), **values})


def device_inputs(family: str = FAMILY) -> Tuple[Dict[str, str], int]:
    """({activation kind: its symbol's name}, chunks) of the per-device assembly's inputs (generated)."""
    return _module(family).DEVICE_KINDS, _module(family).DEVICE_CHUNKS


class MissingSymbol(ValueError):
    """A term reads a symbol the configuration gives no value (device.py reports it as a ConfigError)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


# ----------------------------------------------------------------------------- trees
def _ev(t, v, graph, q=Fraction):
    """A generated tree at ``v``, term references through ``graph``, ratios (``["q", a, b]``, negative powers) as ``q(a,
    b)``: Fraction, or numpy division over float64 arrays (derivations/analyses/exact.py)."""
    kind = type(t)
    if kind is int:
        return t
    if kind is str:
        try:
            return v[t]
        except KeyError:
            raise MissingSymbol(t) from None
    op = t[0]
    if op == "*":
        return prod(_ev(a, v, graph, q) for a in t[1:])
    if op == "+":
        return sum(_ev(a, v, graph, q) for a in t[1:])
    if op == "^":
        base, k = _ev(t[1], v, graph, q), t[2]
        return base ** k if k >= 0 else q(1, base ** -k)
    if op == "r":
        return graph.term(t[1])
    if op == "q":
        return q(t[1], t[2])
    raise ValueError(f"unknown node {op!r}")


def _reads(t, out: set, refs: set) -> None:
    """The symbols a tree reads (into ``out``) and the terms it refers to (into ``refs``)."""
    if type(t) is str:
        out.add(t)
    elif type(t) is list:
        if t[0] == "r":
            refs.add(t[1])
        elif t[0] != "q":
            for a in t[1:]:
                _reads(a, out, refs)


@lru_cache(maxsize=None)
def _symbols(family: str, structure: Tuple[bool, ...]) -> Dict[str, Tuple[str, ...]]:
    """{term id: the symbols its value reads, through the terms it refers to} of one structure."""
    parts_of = _terms(family, structure)
    own, refs = {}, {}
    for tid, parts in parts_of.items():
        own[tid], refs[tid] = set(), set()
        for part in parts:
            _reads(part[2], own[tid], refs[tid])
    out: Dict[str, Tuple[str, ...]] = {}

    def close(tid):
        if tid not in out:
            got = set(own[tid])
            for r in refs[tid]:
                got.update(close(r))
            out[tid] = tuple(sorted(got))
        return out[tid]
    for tid in parts_of:
        close(tid)
    return out


#: {((family, structure), term id, (its symbols' values and types)): value}: a term evaluated at one substitution is
#: reused at every other that gives its symbols the same values (the search's step time evaluates the device's
#: parameters at every (TP, EP, ETP) and stage count; the parameter terms under them read none of those)
_VALUES: Dict[Tuple, object] = {}
_VALUES_MAX = 1 << 16


class Terms:
    """The terms of one structure at one substitution, each evaluated once; ``q`` as :func:`_ev`."""

    def __init__(self, structure, values: Mapping, family: str = FAMILY, q=Fraction):
        self._name = (family, tuple(structure))
        self.parts_of = _terms(*self._name)
        self.v = values
        self.q = q
        self._memo: Dict[str, Fraction] = {}

    def __contains__(self, tid: str) -> bool:
        return tid in self.parts_of

    def term(self, tid: str):
        out = self._memo.get(tid)
        if out is None:
            v, key = self.v, None
            if self.q is Fraction:
                try:
                    key = (self._name, tid, tuple((v[x], type(v[x])) for x in _symbols(*self._name)[tid]))
                except KeyError:  # a symbol unset: evaluated, to say which (MissingSymbol)
                    key = None
            out = _VALUES.get(key) if key is not None else None
            if out is None:
                out = sum(_ev(part[2], v, self, self.q) for part in self.parts_of[tid])
                if key is not None:
                    if len(_VALUES) >= _VALUES_MAX:
                        _VALUES.clear()
                    _VALUES[key] = out
            self._memo[tid] = out
        return out

    def parts(self, tid: str) -> List[Tuple[str, Tuple[str, ...], object]]:
        """[(part key, tags, value), ...] of term ``tid``."""
        return [(key, tuple(tags), _ev(t, self.v, self, self.q)) for key, tags, t, _ in self.parts_of[tid]]

    def labels(self, tid: str) -> Dict[str, str]:
        """{part key: the part's label} of term ``tid`` (what the paper calls each row)."""
        return {key: label for key, _, _, label in self.parts_of[tid]}


def reads(structure, tid: str, family: str = FAMILY) -> Tuple[str, ...]:
    """The symbols term ``tid`` reads, through the terms it refers to (sorted)."""
    return _symbols(family, tuple(structure))[tid]


def exact(structure, tid: str, values: Mapping) -> Fraction:
    """The exact value of term ``tid`` of a model structure at ``values`` (names -> numbers)."""
    return Fraction(Terms(structure, derived(values)).term(tid))


# ----------------------------------------------------------------------------- activations
OPS_PREFIX = "op:"


def features(view, family: str = FAMILY) -> Dict[str, str]:
    """The features of a view (derivations.activations.views.View) the decision tables read."""
    names = _json(family)["features"]
    conv = view.conv
    out = {"recompute": view.recompute, "attention": view.attention, "fp8": "1" if view.fp8 else "0"}
    for name in names:
        if name.startswith(OPS_PREFIX):
            out[name] = "1" if name[len(OPS_PREFIX):] in view.ops else "0"
        elif name not in out:
            out[name] = getattr(conv, name)
    return out


@lru_cache(maxsize=None)
def _activations(family: str, flags: Tuple[Tuple[str, bool], ...]) -> Tuple[Dict, List]:
    data = _json(family)["activations"]
    return resolve(data["kinds"], dict(flags)), data["exprs"]


def _kinds(q_lora):
    """The activation tables of DeepSeek's ``q_lora`` flag, or of another family's Shape (installed)."""
    if isinstance(q_lora, bool):
        return _activations(FAMILY, (("q_lora", q_lora),))
    fam = q_lora.declared
    flags = dict(q_lora.flags)
    return _activations(fam.name, tuple((f, bool(flags[f])) for f in fam.activation_flags))


@lru_cache(maxsize=4096)
def kept(view, q_lora: bool) -> Dict[str, Tuple]:
    """{kind: ((key, expression index or None | (count, sub indices)), ...)}: what ``view`` keeps of each tensor; two
    views keep the same parts of a kind exactly when these are equal. Cached: never to be changed."""
    f = features(view, FAMILY if isinstance(q_lora, bool) else q_lora.family)
    kinds, _ = _kinds(q_lora)
    out = {}
    for kind, specs in kinds.items():
        rows = []
        for spec in specs:
            if spec[0] == "P":
                _, key, feats, table = spec
                rows.append((key, table.get("|".join(f[x] for x in feats))))
            else:
                _, key, count, subs = spec
                got = sorted(i for i in (table.get("|".join(f[x] for x in feats)) for _, feats, table in subs)
                             if i is not None)
                rows.append((key, (count, tuple(got)) if got else None))
        out[kind] = tuple(rows)
    return out


def activation_values(view, q_lora: bool, values: Mapping, kinds: Iterable[str] = None, q=Fraction,
                      memo: Optional[Dict[int, object]] = None) -> Dict[str, Fraction]:
    """{kind: bytes} of the tensors ``view`` keeps at ``values``; ``q`` as :func:`_ev`; ``memo``: {expression index:
    value} at ``values``, shared between views."""
    _, exprs = _kinds(q_lora)
    memo = {} if memo is None else memo

    def at(i):
        if i not in memo:
            memo[i] = _ev(exprs[i], values, None, q)
        return memo[i]

    def bytes_of(row):  # a tensor's, or a group's: its count times the sum of its kept tensors'
        if not isinstance(row, tuple):
            return at(row)
        inner = sum(at(i) for i in row[1])
        return at(row[0]) * inner
    return {kind: sum(bytes_of(row) for _, row in rows if row is not None)
            for kind, rows in kept(view, q_lora).items() if kinds is None or kind in kinds}


def tensor_values(view, q_lora: bool, values: Mapping, kind: str) -> Dict[str, Fraction]:
    """{tensor key (a group's ``<group>.<tensor>``): bytes} of every tensor ``view`` keeps of ``kind``."""
    kinds, exprs = _kinds(q_lora)
    f = features(view, FAMILY if isinstance(q_lora, bool) else q_lora.family)
    out = {}
    for spec in kinds.get(kind, ()):
        if spec[0] == "P":
            _, key, feats, table = spec
            i = table.get("|".join(f[x] for x in feats))
            if i is not None:
                out[key] = _ev(exprs[i], values, None)
            continue
        _, key, count, subs = spec
        for sub, feats, table in subs:
            i = table.get("|".join(f[x] for x in feats))
            if i is not None:
                out[f"{key}.{sub}"] = _ev(exprs[count], values, None) * _ev(exprs[i], values, None)
    return out
