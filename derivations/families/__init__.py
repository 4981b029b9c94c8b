"""Model families: each package here is one family (``derivations/families/<name>/``), its ``__init__`` a
:class:`Family` subclass (declarations, no sympy) named ``FAMILY``, registered on first use; a family from elsewhere
(a test's toy) is added with :func:`register`.  The contract: derivations/families/README.md.  Families never import
each other (an import-linter contract in pyproject.toml).
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import pkgutil
import sys
import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Kind:
    """A kind of sublayer with activation terms of its own, as the report names it.

    id: its term under the paper's view (``act.mla.layer``; a view's terms add a suffix); what: one of
    it in words; provenance: where its tensor list comes from; symbols: the paper's symbol of the term
    per id suffix ({"": "M_1^A", ".full": "M_2^A"}); full: what full recomputation keeps of it with the
    paper's two checkpoints per layer and with one (None: not a layer, it keeps everything);
    full_provenance: the provenance of its full-recomputation term, if the paper prints it; label: its row
    in ``act.layer`` and ``act.stage``; per: how many a stage holds (layers: every layer, L_d + L_m; moe: its
    L_m MoE layers; dense: its L_d dense layers; last: e_H, on the last stage only).
    """

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
    """A divisibility rule of a parallel layout over one of the family's dimensions: ``axis`` (a layout
    degree: tp, ep, etp, ...) must divide the model's ``symbol`` (ModelSpec.named()); ``rule`` names it in a
    ConfigError, whose message is ``text`` formatted with the layout's degrees (TP, EP, ...), the model's
    symbols and its ``name``.  ``symbol`` None is the layout's own rule ``rule`` (edp-integer: EDP =
    DP TP CP / (EP ETP) an integer) at this place in the order (derivations/config/layout.py)."""

    rule: str
    symbol: Optional[str]
    axis: str = ""
    text: str = ""


class Family:
    """A model family: the base class its folder's ``__init__`` subclasses (``FAMILY``, its one instance).

    Class attributes declare what it is (the defaults: no experts, MTP or structure flags): name (its package and
    its generated files' prefix), title, short (``MLA + MoE``), model_types, dimensions ((config field, ModelSpec
    attribute, meaning) of each required positive integer), topk_methods; kinds (its sublayers with a tensor list,
    the attention's first), layer_terms (:class:`Kind`), layer (the kinds of ``act.layer``), attention_label
    (``MLA``: its parameter term ``params.<attention>``), layer_what; sections (:data:`SECTIONS` that build on its
    parameters); flags (ModelSpec.structure's names), structure_letters (one per flag in generated file names:
    DeepSeek's ``q1b1t0``), activation_flags (the flags its tensor lists depend on); divides (:class:`Divides`, in
    order).  Its hooks, the methods below, read the modules of its folder (:attr:`package`); a family overrides one
    to behave otherwise.
    """

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
    #: flags added after the first structures were named: a structure names them only when set (DeepSeek's
    #: ``indexer``: ``q1b1t0`` has none, ``q1b1t0i1`` has DSA's indexer), so earlier names keep meaning the same
    late_flags: Tuple[str, ...] = ()
    #: (flag, flag it needs): a structure with the first set and the second not does not exist (DeepSeek: the
    #: DSA indexer reads the query's compressed form, so ``indexer`` needs ``q_lora``)
    requires: Tuple[Tuple[str, str], ...] = ()
    #: (model_type, field, inner model_type when the field names none): configs that hold one of the family's
    #: language models in a field (Kimi K2.5's ``kimi_k25``: its ``text_config``, a DeepSeek-V3); the rest of such
    #: a config (a vision tower) is not counted
    wrappers: Tuple[Tuple[str, str, str], ...] = ()
    #: (symbol, feature, meaning): counts of a stage beside L_d, L_m, e_E, e_H, each the number of its layers whose
    #: ``ModelSpec.layer_features()`` holds ``feature`` (DeepSeek-V4's L_C: layers with compressed sparse attention)
    counts: Tuple[Tuple[str, str, str], ...] = ()
    #: (key, label, term id): parameter terms every transformer layer holds beside its attention, FFN and norms
    #: (DeepSeek-V4's hyper-connections), replicated over TP
    layer_extra: Tuple[Tuple[str, str, str], ...] = ()
    #: (key, label, count symbol, term id, where): parameter terms a stage holds ``count`` times beside its layers
    #: (DeepSeek-V4's CSA compressors, L_C of them), counted in the stage ("stage") or only as a checkpoint stores
    #: them ("checkpoint"); replicated over TP
    additions: Tuple[Tuple[str, str, str, str, str], ...] = ()
    #: what one ``act.layer`` is, where the family's layers differ (DeepSeek-V4's: "one sliding layer", no compressor);
    #: "" reads as DeepSeek's "one MoE layer"
    layer_name: str = ""
    #: the features of :attr:`counts` a stage's content names beside its MoE count (DeepSeek-V4's attention types:
    #: "11 MoE (4 CSA, 7 HCA)")
    named_counts: Tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"<family {self.name} ({self.package})>"

    # -- its folder ------------------------------------------------------------------------------------
    @property
    def package(self) -> str:
        """The family's folder as a package: the module its class is defined in (``derivations.families.deepseek``;
        a test's toy family: the folder it was imported from)."""
        return type(self).__module__

    def module(self, part: str):
        """The module ``part`` of the family's folder (``config``, ``parameters``, ...; imported on first use:
        ``parameters`` and ``activations`` need sympy)."""
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
        """The family's model spec of a parsed config.json, every field it uses checked through ``fields``
        (derivations.config.hfconfig.Fields)."""
        return self.module("config").from_fields(fields, name, source)

    def config_fields(self, spec) -> Dict:
        """The config.json fields of ``spec`` (what :meth:`read_config` reads back: derivations/config/presets.py
        ``checked`` validates a spec built in Python by reading them)."""
        return self.module("config").fields_of(spec)

    def shape_name(self, model_type: str, dims) -> str:
        """The name of a model read from a file, from what it is (``deepseek_v3 (h 7168, 61 layers, 256 experts)``)."""
        return self.module("config").shape_name(model_type, dims)

    # -- hooks: terms (sympy) -----------------------------------------------------------------------------------
    def parameter_terms(self, registry, flags):
        """The terms of its matrices (``params.<attention>``, ``params.embedding``, ...) for the structure ``flags``
        ({flag: value}), before the shared :attr:`sections` build on them."""
        return self.module("parameters").terms(registry, self, flags)

    def activation_specs(self, kind: str, flags):
        """The tensors one sublayer of ``kind`` keeps for backward (Parts and Groups) under ``flags``."""
        return self.module("activations").specs(kind, flags)

    def special_symbols(self) -> Dict:
        """{name: expression} of the non-polynomial pieces of its terms (DeepSeek-V4's floor(s / m_C)), each printed
        as one input of its generated evaluators."""
        return dict(getattr(self.module("activations"), "SPECIAL", {})) if "activations" in self.sections else {}

    def notation(self):
        """Its own symbols' module (registered beside the paper's on import: DeepSeek-V4's d_a, n_hc, ...), or None."""
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
        """The family's defaults of the layout (between a conventions preset and the paper's): EP = ETP = 1
        for a family with no experts to split (the paper's EP = 8 is DeepSeek-V3's)."""
        return {axis: 1 for axis in ("ep", "etp") if not self.splits(axis)}

    # -- hooks: structures and the names of its generated evaluators ----------------------------------------------
    @property
    def letters(self) -> str:
        """One letter per flag, in order, naming structures (:attr:`structure_letters`, else each flag's first)."""
        return self.structure_letters or "".join(f[0] for f in self.flags)

    def structure_key(self, structure) -> str:
        """The name of a structure (its flags' values, in order) in generated file names: ``q1b1t0`` (a late
        flag only when set: ``q1b1t0i1``)."""
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
        """Each assignment ({name: value}) of the flags its tensor lists depend on (DeepSeek's q_lora: two;
        none: one)."""
        return [dict(zip(self.activation_flags, values))
                for values in itertools.product((True, False), repeat=len(self.activation_flags))]

    @property
    def attention(self) -> str:
        """The kind of its attention sublayer (``mla`` for DeepSeek: term ids ``act.mla.layer``, ...)."""
        return self.kinds[0]


_REGISTRY: Dict[str, Family] = {}
#: Held while the packages' families are found and while a family is added: the first use from many threads at once
#: waits for the whole registry (re-entrant: a family's import may read the registry it is being added to).
_LOCK = threading.RLock()
#: True once every package's family is registered (set after, never before: a reader seeing it sees them all).
_LOADED = False
#: True while this thread registers the packages' families (a read from inside that import sees the ones so far).
_LOADING = False


def register(family: Family) -> Family:
    """Add ``family`` (a test's toy family, or one of the packages here); its model_types must be new (the
    packages' families are found first, so a family registered early cannot hide or take theirs)."""
    with _LOCK:
        _load()
        return _add(family)


def _add(family: Family) -> Family:
    """Add ``family`` (under the lock) to a new registry dict: a reader iterating the old one meanwhile sees it
    whole."""
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
    """The registry, after registering the ``FAMILY`` of every package here once (a new family is found by being a
    package).  Thread-safe: a thread arriving while another registers them waits until all are registered."""
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
    """Whether family ``name`` is one of derivations/families/ (its code is memsym's: caches keyed by memsym's
    sources describe it; a family registered from elsewhere is never cached)."""
    fam = find(name)
    return fam is not None and fam.package.startswith(__name__ + ".")


def unsupported(model, what: str):
    """The error (exit 2, one line) for ``what`` asked of a model whose family has no terms for it: other
    tools' conventions (a family without the ``conventions`` section), the search's committed kernels
    and the --tensors listing (DeepSeek's)."""
    fam = find(getattr(model, "family", None))
    title = fam.title if fam is not None else "unknown"
    return ConfigError("family", f"{what} is not available for {model.name} (family {title}): it covers the "
                                 f"DeepSeek family's models")


def wrapper(model_type: str):
    """(field, inner model_type default) of a config whose ``model_type`` holds a family's language model in a
    field (:attr:`Family.wrappers`), or None."""
    return next(((field, inner) for f in _load().values() for mt, field, inner in f.wrappers if mt == model_type),
                None)


def model_types() -> Tuple[str, ...]:
    """Every model_type some family reads, in registration order."""
    return tuple(t for f in _load().values() for t in f.model_types)
