"""Model families: each package here is one family, its ``__init__``'s ``FAMILY`` a :class:`Family` subclass
(declarations, no sympy), registered on first use; a family from elsewhere (a test's toy) is added with
:func:`register`.  The contract: derivations/families/README.md.
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import pkgutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from symbolic import tomlfile
from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Kind:
    """A kind of sublayer with activation terms of its own (``id``: ``act.mla.layer``); ``full``: what full
    recomputation keeps with two checkpoints per layer and with one; ``per``: layers, moe, dense or last (e_H)."""

    name: str
    id: str
    what: str
    provenance: str
    symbols: Tuple[Tuple[str, str], ...] = ()
    full: Optional[Tuple[str, str]] = None
    full_provenance: str = ""
    label: str = ""
    per: str = "layers"


#: The shared sections, in the order they build a registry (derivations/terms.py ``_build``).
SECTIONS = ("parameters", "static", "zero", "activations", "overheads", "conventions")


@dataclass(frozen=True)
class Divides:
    """A layout rule: ``axis`` must divide the model's ``symbol`` (ConfigError ``rule``, message ``text``); ``symbol``
    None: the layout's own rule ``rule`` (edp-integer) at this place in the order."""

    rule: str
    symbol: Optional[str]
    axis: str = ""
    text: str = ""


#: The paper's divisibility rules of an MLA/MoE family (Sec. 3: heads split by TP, routed experts by EP, an expert's
#: width by ETP), in the order derivations/config/layout.py checks them; a family adds its own after them.
MOE_DIVIDES = (
    Divides("tp-divides-heads", "n_h", "tp", "TP={TP} must divide n_h={n_h} (attention heads of {name})"),
    Divides("ep-divides-experts", "N", "ep", "EP={EP} must divide N={N} (routed experts of {name})"),
    Divides("edp-integer", None),
    Divides("etp-divides-expert", "h_E", "etp", "ETP={ETP} must divide h_E={h_E}"),
)


class Family:
    """A model family: its folder's ``__init__`` subclasses this (``FAMILY``, its one instance).  Class
    attributes declare it (the contract: README.md); the hooks below read the modules of its folder."""

    name: str = ""
    title: str = ""
    short: str = ""
    model_types: Tuple[str, ...] = ()
    dimensions: Tuple[Tuple[str, str, str], ...] = ()
    topk_methods: Tuple[str, ...] = ()
    kinds: Tuple[str, ...] = ()
    layer_terms: Tuple[Kind, ...] = ()
    attention_label: str = ""
    layer_what: str = "transformer layer"
    sections: Tuple[str, ...] = SECTIONS
    structure_letters: str = ""
    activation_flags: Tuple[str, ...] = ()
    divides: Tuple[Divides, ...] = ()
    layer: Tuple[str, ...] = ()
    flags: Tuple[str, ...] = ()
    #: flags a structure's name holds only when set (DeepSeek's ``indexer``: ``q1b1t0``, ``q1b1t0i1``)
    late_flags: Tuple[str, ...] = ()
    #: (flag, flag it needs): DeepSeek's ``indexer`` reads the compressed query, so needs ``q_lora``
    requires: Tuple[Tuple[str, str], ...] = ()
    #: (model_type, field, inner model_type): configs holding the family's language model in a field (Kimi K2.5's
    #: ``text_config``); the rest (a vision tower) is not counted
    wrappers: Tuple[Tuple[str, str, str], ...] = ()
    #: (symbol, feature, meaning): a stage's count of layers with ``feature`` (DeepSeek-V4's L_C: CSA layers)
    counts: Tuple[Tuple[str, str, str], ...] = ()
    #: (key, label, term id): parameters of every layer beside attention, FFN and norms (V4's hyper-connections)
    layer_extra: Tuple[Tuple[str, str, str], ...] = ()
    #: (key, label, count symbol, term id, where): parameters a stage holds ``count`` times (V4's CSA compressors),
    #: counted in the stage ("stage") or only in a checkpoint ("checkpoint")
    additions: Tuple[Tuple[str, str, str, str, str], ...] = ()
    #: what one ``act.layer`` is where layers differ (V4: "one sliding layer"); "": "one MoE layer"
    layer_name: str = ""
    #: the :attr:`counts` a stage's content names beside its MoE count (V4: "11 MoE (4 CSA, 7 HCA)")
    named_counts: Tuple[str, ...] = ()
    #: {spec attribute: default} of the :attr:`dimensions` a config may leave out (V4's, as DeepseekV4Config's)
    dimension_defaults: Dict[str, int] = {}

    def __init_subclass__(cls, **kw):
        """The declaration as data: ``family.toml`` beside the subclass's module, when there is one, sets the class
        attributes it holds (lists as tuples; ``[[layer_terms]]`` as :class:`Kind`)."""
        super().__init_subclass__(**kw)
        file = getattr(sys.modules.get(cls.__module__), "__file__", None)  # (none for a class made in __main__ of -c)
        if file and (path := Path(file).with_name("family.toml")).is_file():
            with tomlfile.package_data(path) as data:
                for key, value in data.items():
                    if not hasattr(Family, key):
                        raise ValueError(f"{key!r} is not a family's declaration (derivations/families/README.md)")
                    setattr(cls, key, tuple(Kind(**_tuples(k)) for k in value) if key == "layer_terms"
                            else _tuples(value))

    def __repr__(self) -> str:
        return f"<family {self.name} ({self.package})>"

    # -- its folder ------------------------------------------------------------------------------------
    @property
    def package(self) -> str:
        """The family's folder as a package (the module its class is defined in)."""
        return type(self).__module__

    def module(self, part: str):
        """The module ``part`` of the family's folder, imported on first use."""
        return importlib.import_module(f"{self.package}.{part}")

    def _has(self, part: str) -> str:
        """The name of the folder's module ``part``, or "" when the folder has none."""
        name = f"{self.package}.{part}"
        return name if name in sys.modules or importlib.util.find_spec(name) is not None else ""

    # the name of each module of the folder, "" when it has none (read as the modules' names: fam.config, fam.report)
    config = property(lambda self: self._has("config"))
    parameters = property(lambda self: self._has("parameters"))
    activations = property(lambda self: self._has("activations"))
    checkpoint = property(lambda self: self._has("checkpoint"))
    report = property(lambda self: self._has("report"))

    # -- hooks: reading a config.json (no sympy) --------------------------------------------------------------
    def read_config(self, fields, name: Optional[str] = None, source: Optional[str] = None):
        """The model spec of a parsed config.json (``fields``: derivations.config.hfconfig.Fields)."""
        return self.module("config").from_fields(fields, name, source)

    def config_fields(self, spec) -> Dict:
        """The config.json fields of ``spec`` (what :meth:`read_config` reads back)."""
        return self.module("config").fields_of(spec)

    def shape_name(self, model_type: str, dims) -> str:
        """The name of a model read from a file, from what it is (``deepseek_v3 (h 7168, 61 layers, 256 experts)``)."""
        return self.module("config").shape_name(model_type, dims)

    # -- hooks: terms (sympy) -----------------------------------------------------------------------------------
    def parameter_terms(self, registry, flags):
        """The terms of its matrices (``params.<attention>``, ...) for the structure ``flags``."""
        return self.module("parameters").terms(registry, self, flags)

    def activation_specs(self, kind: str, flags):
        """The tensors one sublayer of ``kind`` keeps for backward (Parts and Groups) under ``flags``."""
        return self.module("activations").specs(kind, flags)

    def special_symbols(self) -> Dict:
        """{name: expression} of its terms' non-polynomial pieces (V4's floor(s / m_C)), inputs of its evaluators."""
        return dict(getattr(self.module("activations"), "SPECIAL", {})) if "activations" in self.sections else {}

    def notation(self):
        """Its own symbols' module (V4's d_a, n_hc, ...), or None."""
        return self.module("notation") if self._has("notation") else None

    # -- hooks: what a report and a checkpoint listing read ----------------------------------------------------
    def report_sections(self) -> Optional[tuple]:
        """Its report's sections (dicts of memsym/report/sections.py SectionSpec fields), or None for the paper's."""
        return self.module("report").SECTIONS if self._has("report") else None

    def checkpoint_files(self, model) -> Optional[Dict]:
        """What a released checkpoint of ``model`` stores (its tensors, by file), or None when not listed."""
        return self.module("checkpoint").checkpoint_files(model) if self._has("checkpoint") else None

    # -- hooks: the layout ----------------------------------------------------------------------------------
    def splits(self, axis: str) -> bool:
        """Whether some layout rule of the family splits a dimension by ``axis`` (DeepSeek: EP splits N)."""
        return any(d.axis == axis for d in self.divides if d.symbol)

    def layout_defaults(self) -> Dict[str, int]:
        """The family's layout defaults: EP = ETP = 1 for a family with no experts to split."""
        return {axis: 1 for axis in ("ep", "etp") if not self.splits(axis)}

    # -- hooks: structures and the names of its generated evaluators ----------------------------------------------
    @property
    def letters(self) -> str:
        """One letter per flag, in order, naming structures (:attr:`structure_letters`, else each flag's first)."""
        return self.structure_letters or "".join(f[0] for f in self.flags)

    def structure_key(self, structure) -> str:
        """A structure's name in generated file names: ``q1b1t0`` (a late flag only when set: ``q1b1t0i1``)."""
        return "".join(f"{c}{int(x)}" for c, x, f in zip(self.letters, structure, self.flags)
                       if x or f not in self.late_flags)

    def structures(self) -> Tuple[Tuple[bool, ...], ...]:
        """Every structure of the family: each combination of its flags that :attr:`requires` allows."""
        out = []
        for values in itertools.product((True, False), repeat=len(self.flags)):
            by = dict(zip(self.flags, values))
            if not any(by[a] and not by[b] for a, b in self.requires):
                out.append(values)
        return tuple(out)

    def activation_key(self, flags) -> str:
        """The name of the activation tables of the flags ``flags`` ({name: value}) depend on (``q1``), or ``all``."""
        by_flag = dict(zip(self.flags, self.letters))
        return "".join(f"{by_flag[f]}{int(flags[f])}" for f in self.activation_flags) or "all"

    def activation_flag_sets(self):
        """Each assignment ({name: value}) of the flags its tensor lists depend on."""
        return [dict(zip(self.activation_flags, values))
                for values in itertools.product((True, False), repeat=len(self.activation_flags))]

    @property
    def attention(self) -> str:
        """The kind of its attention sublayer (``mla`` for DeepSeek: term ids ``act.mla.layer``, ...)."""
        return self.kinds[0]


def _tuples(value):
    """``value`` read from TOML with its lists as tuples (a table's values too)."""
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


_REGISTRY: Dict[str, Family] = {}
#: Held while families are found or added (re-entrant: a family's import may read the registry); _LOADED is set
#: once all are registered, _LOADING while they are (a read from inside that import sees the ones so far).
_LOCK = threading.RLock()
_LOADED = False
_LOADING = False


def register(family: Family) -> Family:
    """Add ``family`` (a test's toy); its model_types must be new (the packages' families are found first)."""
    with _LOCK:
        _load()
        return _add(family)


def _add(family: Family) -> Family:
    """Add ``family`` (under the lock) to a new registry dict: a reader of the old one sees it whole."""
    global _REGISTRY
    if not isinstance(family, Family) or not family.name:
        raise TypeError(f"a family is an instance of a derivations.families.Family subclass with a name, got "
                        f"{family!r}")
    taken = {t: f.name for f in _REGISTRY.values() if f.name != family.name for t in f.model_types}
    clash = sorted(set(family.model_types) & set(taken))
    if clash:
        raise ValueError(f"family {family.name!r}: model_type {clash[0]!r} is read by family {taken[clash[0]]!r}")
    _REGISTRY = {**_REGISTRY, family.name: family}
    return family


def _load() -> Dict[str, Family]:
    """The registry, after registering the ``FAMILY`` of every package here once (thread-safe)."""
    global _LOADED, _LOADING
    if _LOADED:
        return _REGISTRY
    with _LOCK:
        if _LOADED or _LOADING:
            return _REGISTRY
        _LOADING = True
        try:
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name != "deepseek"):
                family = getattr(importlib.import_module(f"{__name__}.{info.name}"), "FAMILY", None)
                if isinstance(family, Family):
                    _add(family)
            _LOADED = True
        finally:
            _LOADING = False
    return _REGISTRY


def get(name: str) -> Family:
    """The family called ``name``."""
    return _load()[name]


def find(name) -> Optional[Family]:
    """The family called ``name``, or None."""
    return _load().get(name) if isinstance(name, str) else None


def all() -> Tuple[Family, ...]:  # noqa: A001 (families.all(), read as a sentence)
    """Every family, in registration order (DeepSeek's first)."""
    return tuple(_load().values())


def for_model_type(model_type: str):
    """The family that reads configs of ``model_type``, or None."""
    return next((f for f in _load().values() if model_type in f.model_types), None)


def packaged(name) -> bool:
    """Whether family ``name`` is one of derivations/families/ (not registered from elsewhere)."""
    fam = find(name)
    return fam is not None and fam.package.startswith(__name__ + ".")


def unsupported(model, what: str):
    """The ConfigError for ``what`` asked of a model whose family has no terms for it."""
    fam = find(getattr(model, "family", None))
    title = fam.title if fam is not None else "unknown"
    return ConfigError("family", f"{what} is not available for {model.name} (family {title}): it covers the "
                                 f"DeepSeek family's models")


def wrapper(model_type: str):
    """(field, inner model_type default) of a wrapper ``model_type`` (:attr:`Family.wrappers`), or None."""
    return next(((field, inner) for f in _load().values() for mt, field, inner in f.wrappers if mt == model_type),
                None)


def model_types() -> Tuple[str, ...]:
    """Every model_type some family reads, in registration order."""
    return tuple(t for f in _load().values() for t in f.model_types)
