"""What the calculator page evaluates: the data and formulas ``memsym page`` prints from the derivation's terms.

Nothing here writes a formula: every expression comes from ``derivations`` and is printed
to JavaScript (exact BigInt rationals) and MathML by :mod:`memsym.page.codegen`.

* Model states: for each model structure (query compression, routing bias, tied
  embeddings) and weight side of the conventions (``--rank`` x ``--shared-expert``), the
  terms ``derivations.variant(model, training)`` names for weights, gradients and optimizer
  states under every ZeRO stage (``side.component_ids``), and the device's P_n and P_m.
* Activations: the tables of :mod:`memsym.page.activations`, one per tensor of the Sec. 5 lists.
* One device: the per-device assembly of derivations/assembly/device_terms.py (activations of one
  micro-batch, (L_d + L_m) M^A + L_m M^E + L_d M^D + delta_H M^H, or under a schedule n_fl x that at each
  chunk; the total; the layer split; the Sec. 6 peak at both ends), printed as the command line's is; and the
  step's moments (derivations/assembly/step_terms.py: what one micro-batch's backward holds above the end of its
  forward), whose largest, added to the total, is the step's peak a verdict judges.
* Schedules: the in-flight formulas of ``derivations.schedules.formulas``.
* The ends of the Sec. 6 ranges (derivations/assembly/overheads.py), shown beside the peaks.
* The options' data: --linear-recipe's rows (derivations/assembly/quantized.py, found by calling it),
  --offload-activations' module tables (derivations/assembly/offload.py) and validate_training's refusals of them.
* The layout search (:mod:`memsym.page.search`): the search's kernels and the step-time model, the generated
  modules' functions in JavaScript.
"""
from __future__ import annotations

import itertools
from fractions import Fraction
from types import SimpleNamespace
from typing import Dict, List, Tuple

import sympy as sp

from derivations import config as cfg
from derivations import variant

from .activations import activation_units, features, shape_of
from ..lines import one_line
from .codegen import js, mathml, symbols_of
from derivations.config import limits as L
from derivations.generate import device_shape, structures
from derivations import families as _families
from derivations.config.hfconfig import covered
from derivations.config.defaults import RUN_DEFAULTS, RUN_OPTIONS
from derivations.families import get as _family
from derivations.notation import EXTENSION_DEFAULTS, M_buf, PAPER_BYTES, f_frag
from derivations.config.presets import PRESET_NAMES, preset_path

#: The family the page reads configs of (its JavaScript reader maps DeepSeek's fields: templates/page/).
DEEPSEEK = _family("deepseek")

class Pool:
    """Distinct expressions, each printed once: index -> JavaScript function and MathML."""

    def __init__(self):
        self.index: Dict[Tuple, int] = {}
        self.fns: List[str] = []
        self.mls: List[str] = []
        self.exprs: List[sp.Expr] = []
        self.symbols: set = set()
        self.reads: List[List[str]] = []

    def add(self, expr, display=None) -> int:
        expr = sp.sympify(expr)
        # sympy's structural equality and hash: two expressions are one exactly when their trees are (as their
        # srepr texts are), without printing them
        key = (expr, None if display is None else sp.sympify(display))
        if key not in self.index:
            self.index[key] = len(self.fns)
            self.fns.append(f"(e) => {js(expr)}")
            self.exprs.append(expr)
            self.mls.append(mathml(expr if display is None else display))
            self.reads.append(sorted(symbols_of(expr)))
            self.symbols |= set(self.reads[-1])
        return self.index[key]


# ----------------------------------------------------------------------------- model states
SIDES = tuple((rank, shared) for rank in cfg.CONVENTION_SWITCHES["rank"].values
              for shared in cfg.CONVENTION_SWITCHES["shared_expert"].values)


def _side_training(rank: str, shared: str) -> cfg.Training:
    return cfg.Training(conventions=cfg.Conventions(rank=rank, shared_expert=shared))


def _display(term):
    """A model-state term with P_n and P_m as symbols: (B_m + B_1 + B_2)(P_n/(DP CP) + P_m/EDP)."""
    out = 0
    for p in term.parts:
        sym = {"non_moe": sp.Symbol("P_n"), "moe": sp.Symbol("P_m")}.get(p.key)
        if sym is None:
            return term.expr
        out += sp.Mul(*[sp.sympify(f) for f in p.num[:-1]]) * sym / sp.Mul(*[sp.sympify(f) for f in p.den])
    return out


def model_states(pool: Pool, fam=DEEPSEEK) -> Dict:
    """{structure key: {side: {ids: {zero: {component: id}}, terms: {id: fn}, P_n, P_m} or {refused: message}}}
    of every structure of ``fam`` (its flags' values, :meth:`Family.structure_key`); a weight side the family
    has no terms for (other tools' conventions) is refused with the command line's message."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.assembly.sides import weight_side, weight_side_of
    from symbolic.errors import ConfigError
    out = {}
    for structure in structures(fam):
        model = SimpleNamespace(structure=structure, family=fam.name, name="{name}")
        per = {}
        for rank, shared in SIDES:
            tr = _side_training(rank, shared)
            try:
                weight_side_of(model, tr.conventions)
            except ConfigError as e:  # the model's name is put in by the page
                per[f"{rank}/{shared}"] = {"refused": str(e)}
                continue
            var = variant(model, tr)
            side = weight_side(tr.conventions)
            ids = {z: {k: v for k, v in side.component_ids(z).items() if k in ("weights", "gradients", "optimizer")}
                   for z in cfg.ZERO_NAMES}
            terms = {t: pool.add(var.terms[t].expr, _display(var.terms[t]))
                     for z in ids.values() for t in z.values()}
            if side.rank == "megatron":
                t = var.terms[side.params]
                P_n = sum((p.expr for p in t.parts if "non_moe" in p.tags), sp.Integer(0))
                P_m = sum((p.expr for p in t.parts if "moe" in p.tags), sp.Integer(0))
            else:
                P_n = var.terms[side.non_moe].expr  # no experts: no P_m (device.py)
                P_m = var.terms[side.moe].expr if side.moe in var.terms else sp.Integer(0)
            per[f"{rank}/{shared}"] = {"ids": ids, "terms": terms, "P_n": pool.add(P_n), "P_m": pool.add(P_m),
                                       "params_id": side.params}
            if side.rank == "stage" and fam is DEEPSEEK:  # --linear-recipe: the weights of TE's linear layers
                per[f"{rank}/{shared}"]["linear"] = pool.add(_linear_params(var, side.params))
        out[fam.structure_key(structure)] = per
    return out


def _linear_params(var, params_id: str) -> sp.Expr:
    """quantized.linear_params (derivations/assembly/quantized.py) called on the variant's expressions: the weights
    of the TE linear layers on the device, in the held composition's symbols (the page's model-state inputs)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations import notation as nt
    from derivations.assembly import quantized
    terms = SimpleNamespace(term=lambda tid: var.terms[tid].expr)
    return quantized.linear_params(terms, {k: nt.SYMBOLS[k] for k in ("e_E", "e_H", "L_m", "N", "h")}, params_id)


def linear_recipe(pool: Pool, keys: Dict[str, List[str]]) -> Dict:
    """--linear-recipe on the page: {bytes: {recipe: [input, weight]} (derivations/config/quantization.py
    FORMATS), rows: {recipe: {attention: {kind: [[row, gates, value, coefficient], ...]}}}, refusals}.  A row of
    quantized._rows (derivations/assembly/quantized.py) as data, found by calling it: what one layer micro-batch of
    ``kind`` changes by is the coefficient (an expression in B_a) times the kept bytes of the tensor ``value``, when
    every tensor of ``gates`` is kept (``keys``: {kind: the tensors of its lists}); checked against _rows at random
    bytes.  The MTP module's eh_proj input (quantized.parts' 'mtp' row) is one more row of kind mtp."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    import random
    from derivations import notation as nt
    from derivations.assembly import quantized
    from derivations.config.quantization import FORMATS
    B_a, one, rng = nt.SYMBOLS["B_a"], Fraction(1), random.Random(1)
    rows = {}
    for recipe, f in FORMATS.items():
        q = f.input_bytes
        for attention in cfg.ATTENTION:
            tr = SimpleNamespace(linear_recipe=recipe, attention=attention)
            got = {}
            for kind, names in keys.items():
                at = lambda t: {r[0]: r[2] for r in quantized._rows(kind, t, B_a, q, tr)}  # noqa: E731
                full = dict.fromkeys(names, one)
                spec = []
                for name, coef in at(full).items():
                    gates = [k for k in names if name not in at({**full, k: Fraction(0)})]
                    (value,) = [k for k in names if sp.expand(at({**full, k: 2 * one})[name] - 2 * coef) == 0]
                    spec.append([name, gates, value, coef])
                for _ in range(20):  # the rows as data give _rows' deltas at random bytes, some tensors not kept
                    t = {k: Fraction(rng.randint(1, 9)) for k in names if rng.random() < 0.8}
                    want = {name: sp.expand(d) for name, d in at(t).items()}
                    mine = {name: sp.expand(coef * t[value]) for name, gates, value, coef in spec
                            if all(t.get(g) for g in gates)}
                    assert mine == want, (recipe, attention, kind, t)
                got[kind] = [[name, gates, value, pool.add(coef)] for name, gates, value, coef in spec]
            got["mtp"] = [["mtp_eh_in", ["mtp_eh_in"], "mtp_eh_in", pool.add((q - B_a) / B_a)]]
            rows.setdefault(recipe, {})[attention] = got
    return {"bytes": {k: [_q(f.input_bytes), _q(f.weight_bytes)] for k, f in FORMATS.items()}, "rows": rows}


def _refusals() -> Dict:
    """training.validate_training's refusals of the options (derivations/config/training.py: --offload-activations,
    --linear-recipe, --quantized-param-gather) as a table over every value of what those rules read: {axes: [[what,
    values], ...], table: [the index in messages of [the option refused, message], or -1, ...] over the axes' values
    in itertools.product order, messages}; an option given or not (one module offloaded, one recipe: the others
    refuse alike), the recomputation full or not."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from symbolic.errors import ConfigError
    given = [False, True]
    axes = [["linear_recipe", given], ["quantized_params", given], ["fp8", given],
            ["head_state", list(cfg.CONVENTION_SWITCHES["head_state"].values)],
            ["norm_storage", list(cfg.CONVENTION_SWITCHES["norm_storage"].values)], ["zero", sorted(cfg.ZERO_NAMES)],
            ["offload", given], ["full", given]]
    table, messages = [], []
    for vals in itertools.product(*(v for _, v in axes)):
        a = dict(zip((k for k, _ in axes), vals))
        t = cfg.Training(zero=a["zero"], fp8=a["fp8"], recompute="full" if a["full"] else "none",
                         linear_recipe=cfg.LINEAR_RECIPES[0] if a["linear_recipe"] else None,
                         quantized_params=a["quantized_params"],
                         offload=tuple(cfg.OFFLOAD_MODULES)[:1] if a["offload"] else (),
                         conventions=cfg.Conventions(head_state=a["head_state"], norm_storage=a["norm_storage"]))
        try:
            cfg.validate_training(t)
            table.append(-1)
        except ConfigError as e:
            said = [e.constraint.replace("-", "_"), str(e)]
            messages += [said] if said not in messages else []
            table.append(messages.index(said))
    return {"axes": axes, "table": table, "messages": messages}


def offloading() -> Dict:
    """--offload-activations on the page: derivations/assembly/offload.py's tables as data: {modules: {module:
    [[kind, tensor key, element size: a bytes symbol's name or a number], ...]} (MODULE_TENSORS, in
    training.OFFLOAD_MODULES' order), min_elements, moment: the step moment's term id}."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.assembly import offload
    return {"modules": {m: [list(row) for row in offload.MODULE_TENSORS[m]] for m in cfg.OFFLOAD_MODULES},
            "min_elements": offload.MIN_ELEMENTS, "moment": offload.MOMENT}


def device(pool: Pool, fam=DEEPSEEK) -> Dict:
    """The per-device assembly (derivations/assembly/device_terms.py) of ``fam``, printed: {kinds: {kind: symbol},
    chunks, stage: {view variant: act.stage}, variants: {variant: [[name, function], ...]}} (the names in evaluation
    order; the same expressions derivations/generate.py prints to exact Python for the command line) and the
    step's moments (:func:`step`)."""
    # lazy: sympy (only this path needs it)
    from derivations.assembly import device_terms as dt
    shape = device_shape(fam)
    return {"kinds": dict(dt.kinds_of(shape)), "chunks": dt.CHUNKS,
            # act.stage of each view variant, as the page shows it (the assembly's own expression)
            "stage": {f"mtp{int(mtp)}full{int(full)}": pool.add(dt.activation_terms(mtp, full, shape)["stage"])
                      for mtp, full in itertools.product((False, True), repeat=2)},
            "layer": pool.add(dt.activation_terms(False, False, shape)["layer"]),
            "variants": {key: [[name, pool.add(expr)] for name, expr in dt.assembly(mtp, full, holds, shape)]
                         for key, mtp, full, holds in dt.variants()},
            # with the options' terms (--linear-recipe's Q_D, Q_E, Q_H; the others 0), one micro-batch or a schedule
            "options": {key: [[name, pool.add(expr)] for name, expr in dt.assembly(mtp, full, holds, shape, True)]
                        for key, mtp, full, holds in dt.variants(True) if fam is DEEPSEEK},
            **step(pool)}


def step(pool: Pool) -> Dict:
    """The step's moments (derivations/assembly/step_terms.py), printed: {step: {framework: {policy: [[moment,
    function, term id], ...]}}, step_policy, step_none, step_indicators}, in their order (the first largest binds,
    as device.step_excess takes it); a family without one of DeepSeek's symbols reads it as 0 (STEP_INPUTS)."""
    # lazy: sympy (only this path needs it)
    from derivations.assembly import step_names as names, step_terms as stt
    for name, (option, value) in names.INDICATORS.items():
        values = cfg.ATTENTION if option == "attention" else cfg.CONVENTION_SWITCHES[option].values
        if value not in values:
            raise ValueError(f"step_names.INDICATORS: {name} reads {option} = {value!r}, not one of {values}")
    moments = {fw: {pol: [[name, pool.add(term.expr), term.id] for name, term in stt.moments(fw, pol).items()]
                    for pol in names.POLICIES} for fw in names.FRAMEWORKS}
    return {"step": moments, "step_policy": {rc: names.policy_of(rc) for rc in cfg.RECOMPUTE},
            # the kinds' symbols without recomputation (M_A0 of M_A, ...)
            "step_none": dict(names.NONE_OF),
            "step_indicators": {k: list(v) for k, v in names.INDICATORS.items()}}


def family_data(pool: Pool, fam, progress=None) -> Dict:
    """What the page evaluates a model of ``fam`` with: its model states per structure, its activation tables
    per assignment of its activation flags, its device assembly, and its declaration as the page reads it
    (the flags in order and their letters, the layout rules, the layout defaults, the MTP modules).  The tables
    are checked against the views by the tests (tests/test_page.py)."""
    say = progress or (lambda text: None)
    acts = {}
    for flags in fam.activation_flag_sets():
        shape = shape_of(fam, flags)
        shown = f" ({', '.join(f'{k}={v}' for k, v in flags.items())})" if flags else ""
        say(f"{fam.title}: activation tables{shown}")
        acts[fam.activation_key(flags)] = activation_units(pool, shape)
    say(f"{fam.title}: model states and the device assembly")
    return {"title": fam.title, "short": fam.short, "flags": list(fam.flags), "letters": fam.letters,
            "late_flags": list(fam.late_flags),
            "counts": [[sym, feature] for sym, feature, _ in fam.counts], "named_counts": list(fam.named_counts),
            "activation_flags": list(fam.activation_flags),
            "states": model_states(pool, fam), "activations": acts, "device": device(pool, fam),
            "mtp": "mtp" in fam.kinds, "layout_defaults": fam.layout_defaults(),
            "layer_label": fam.layer_name or ("one MoE layer" if "moe" in fam.layer else f"one {fam.layer_what}"),
            "divides": [[d.rule, d.symbol, d.axis, d.text] for d in fam.divides],
            # options that change none of its tensors, refused (derivations/activations/shape.py inert)
            "inert": _inert(fam)}


def _inert(fam) -> Dict:
    """{fp8: FP8 caching retypes none of the family's tensors, ops: the custom recomputation operators naming none}."""
    from derivations.activations import shape as shapes
    fp8, ops = shapes.inert(shapes.of(fam.name, fam.structures()[0]))
    return {"fp8": fp8, "ops": list(ops)}


# ----------------------------------------------------------------------------- schedules, overheads
def schedules(pool: Pool) -> Dict:
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.assembly import schedules as sch
    return {name: {"title": sch.TITLES[name],
                   "chunks": [[which, pool.add(expr), part] for which, expr, part in sch.formulas(name)]}
            for name in cfg.SCHEDULES}


def overheads(pool: Pool) -> Dict:
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.assembly import overheads as oh
    ends = {end: {"f_frag": _q(oh.overhead_values(end)[f_frag]), "M_buf": _q(oh.overhead_values(end)[M_buf])}
            for end in ("low", "high")}
    # their peaks: the device assembly's peak_low, peak_high; at the step's peak (the total plus the step excess,
    # derivations/assembly/step_terms.py), which the verdict judges: the same Sec. 6 peak of step_total
    step_total = sp.Symbol("step_total", nonnegative=True)
    ends_of = {end: oh.named_values(end) for end in ("low", "high")}
    peaks = {end: pool.add(oh.peak(step_total, sp.Rational(o["f_frag"]), sp.Rational(o["M_buf"])))
             for end, o in ends_of.items()}
    return {"ends": ends, "step_peak": peaks}


def _q(x) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


# ----------------------------------------------------------------------------- the options
def options() -> Dict:
    """The options of ``estimate`` the page offers, their values and defaults (from derivations)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.config.recipes import RECIPES
    from derivations.assembly.runtime import buffers_term
    from symbolic.numeric import exact
    lay, tr = cfg.Layout(), cfg.Training()

    def jsonable(v):
        if isinstance(v, tuple):
            return [jsonable(x) for x in v]
        if isinstance(v, Fraction):
            return _q(v)
        return v
    return {
        # the presets' config.json text, read by the page's own reader (as a pasted config.json)
        "presets": {n: _read_text(preset_path(n)) for n in PRESET_NAMES},
        "default_model": cfg.DEFAULT_MODEL,
        "model_types": list(DEEPSEEK.model_types), "topk_methods": list(DEEPSEEK.topk_methods),
        # what the command line's reader says of a config it does not read (hfconfig.from_dict: every family's)
        "all_model_types": list(_families.model_types()), "covered": covered(),
        "other_families": {mt: f.title for f in _families.all() if f is not DEEPSEEK for mt in f.model_types},
        "wrappers": [list(w) for w in DEEPSEEK.wrappers],
        "scoring_funcs": list(DEEPSEEK.module("config").SCORING_FUNCS),
        "dimensions": [list(d) for d in DEEPSEEK.dimensions],
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "etp": lay.etp, "cp": lay.cp},
        "training": {"mbs": tr.mbs, "seq": tr.seq, "zero": tr.zero, "recompute": tr.recompute,
                     "attention": tr.attention, "imbalance": _q(tr.imbalance)},
        # derivations/config/defaults.py: what a named run takes where nobody set it
        "run": {"options": list(RUN_OPTIONS), "defaults": dict(RUN_DEFAULTS)},
        "zero_names": {str(k): v for k, v in cfg.ZERO_NAMES.items()},
        "recompute": list(cfg.RECOMPUTE), "recompute_ops": dict(cfg.RECOMPUTE_OPS),
        "attention": list(cfg.ATTENTION), "schedules": list(cfg.SCHEDULES), "dtypes": dict(cfg.DTYPES),
        "paper_bytes": {k.name: _q(v) for k, v in PAPER_BYTES.items()},
        "extension_defaults": {k.name: _q(v) for k, v in EXTENSION_DEFAULTS.items()},
        "switches": {k: {"option": s.option, "values": list(s.values), "side": s.side, "help": s.help}
                     for k, s in cfg.CONVENTION_SWITCHES.items()},
        "convention_presets": {k: {kk: jsonable(vv) for kk, vv in p.items()}
                               for k, p in cfg.CONVENTION_PRESETS.items()},
        "bytes_conventions": {k: [v[0], v[1]] for k, v in cfg.BYTES_CONVENTIONS.items()},
        "recipes": {k: {"description": r.description, "options": {kk: jsonable(vv) for kk, vv in r.options.items()},
                        "device": list(r.device) if r.device else None, "family": _recipe_family(r)}
                    for k, r in RECIPES.items()},
        "gib": cfg.GiB,
        # --runtime-buffers: the per-device runtime buffers' bytes of each value (derivations/assembly/runtime.py)
        "runtime_buffers": {v: _q(exact(buffers_term(v), {})) for v in cfg.CONVENTION_SWITCHES["runtime_buffers"].values
                            if v != "none"},
    }


def _recipe_family(recipe):
    """[name, title] of the family of a recipe's model (a preset), or None (resolve.py refuses a recipe for
    another family's model)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.config.presets import PRESETS
    model = recipe.options.get("model")
    if model not in PRESETS:
        return None
    fam = _family(PRESETS[model].family)
    return [fam.name, fam.title]


def _read_text(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _limit(lim) -> Dict:
    return {"name": lim.name, "low": lim.low, "high": lim.high, "why": lim.why, "domain": lim.domain}


def _ranges(pred) -> List[List[int]]:
    """The code points where ``pred`` holds, as [first, last] ranges."""
    out, start = [], None
    for c in range(0x110000):
        if pred(chr(c)):
            if start is None:
                start = c
        elif start is not None:
            out.append([start, c - 1])
            start = None
    if start is not None:
        out.append([start, 0x10FFFF])
    return out


def inputs() -> Dict:
    """What the page reads its fields and a pasted config.json with: the limits of derivations/config/limits.py
    (the command line's), and the Python text rules its messages depend on (str.strip's white space,
    repr's printable characters), so that the page refuses what the command line refuses, in its words."""
    return {
        "options": {k: _limit(v) for k, v in L.OPTIONS.items()},
        "fields": {k: _limit(v) for k, v in L.FIELDS.items()},
        "list_lengths": dict(L.LIST_LENGTHS), "set_options": list(L.SET_OPTIONS),
        "max_digits": L.MAX_DIGITS, "max_arg_chars": L.MAX_ARG_CHARS, "max_number_chars": L.MAX_NUMBER_CHARS,
        "layers": L.LAYERS,
        "imbalance": L.IMBALANCE, "int_pattern": L.INT_PATTERN, "decimal_pattern": L.DECIMAL_PATTERN,
        "config_bytes": L.CONFIG_BYTES, "config_depth": L.CONFIG_DEPTH, "config_digits": L.CONFIG_DIGITS,
        # CPython's json reader raises RecursionError (hfconfig: "nested deeper than ...") this deep: the default
        # recursion limit, 1000, less the frames of `memsym estimate` below json.loads; only a file that is
        # invalid JSON beyond that depth is told apart by it
        "json_recursion": 1000 - 13,
        "space": _ranges(str.isspace), "nonprintable": _ranges(lambda c: not c.isprintable()),
    }


def gpus() -> List[Dict]:
    """The GPU table of the fit verdict: the ``--gpu`` presets (derivations/config/gpus.toml)."""
    # lazy: modules this module's importers do not need (loaded only on this path)
    from derivations.config.gpus import presets
    return [{"id": g.key, "name": g.name, "bytes": g.capacity, "capacity": f"{g.capacity} B ({g.kind})",
             "source": g.source} for g in presets().values()]


def model_data(spec) -> Dict:
    """A model read by the command line's reader (``memsym page --model FILE``), as the page evaluates it: its
    family, name, structure flags, layer kinds, the features of each layer and of an MTP module that its family
    counts (ModelSpec.layer_features, mtp_layer_features: DeepSeek's DSA indexer) and its symbols' values
    (ModelSpec.named(); decimal strings)."""
    features = spec.layer_features() if hasattr(spec, "layer_features") else [()] * spec.l
    mtp = spec.mtp_layer_features() if hasattr(spec, "mtp_layer_features") else ()
    return {"family": spec.family, "name": spec.name, "structure": [bool(x) for x in spec.structure],
            "kinds": list(spec.layer_kinds()), "features": [sorted(f) for f in features],
            "mtp_features": sorted(mtp), "named": {k: str(v) for k, v in spec.named().items()},
            "tie_word_embeddings": bool(getattr(spec, "tie_word_embeddings", False)),
            "mtp_layers": int(getattr(spec, "mtp_layers", 0))}


def generate(models=(), progress=None) -> Dict:
    """Everything the page needs: the JavaScript functions, their MathML and the option data: DeepSeek's presets and
    a pasted config.json, or ``models`` ((``--model`` text, ModelSpec) pairs of any family, each once).
    ``progress``: called with a line saying what is being built (memsym page's stderr)."""
    # lazy: the search's data and functions (only this path needs them)
    from . import search
    pool = Pool()
    # a path's control and bidirectional-format characters (ESC, BEL, U+202E) as their codes: the page shows the
    # argument in its text, its menu and the command line it prints (memsym/lines.py)
    models = _distinct([(one_line(argument), spec) for argument, spec in models])
    fams = [DEEPSEEK] if not models else []
    released = released_models() if not models else []
    for _, spec in list(models) + released:
        fam = _family(spec.family)
        if fam not in fams:
            fams.append(fam)
    per = {fam.name: family_data(pool, fam, progress) for fam in fams}
    quant = None
    if DEEPSEEK.name in per:  # --linear-recipe: Megatron-Core's MLA and MoE layers (DeepSeek's tensors)
        keys: Dict[str, List[str]] = {}
        for table in per[DEEPSEEK.name]["activations"].values():
            for u in table:
                if u["kind"] in ("mla", "moe", "dense") and u["key"] not in keys.setdefault(u["kind"], []):
                    keys[u["kind"]].append(u["key"])
        quant = linear_recipe(pool, keys)
    if progress:
        progress("schedules, overheads, options")
    sched = schedules(pool)
    over = overheads(pool)
    opts = options()
    if progress:
        progress("the layout search's kernels and step-time model")
    searched = search.generate()
    given = {argument: model_data(spec) for argument, spec in models}
    if models:  # the given models only: no DeepSeek preset, no pasted config.json
        opts["presets"], opts["default_model"] = {}, next(iter(given))
    return {"fns": pool.fns, "mathml": pool.mls, "symbols": sorted(pool.symbols), "reads": pool.reads, "families": per,
            "models": given, "released": {argument: model_data(spec) for argument, spec in released},
            "schedules": sched, "overheads": over, "quantized": quant, "refusals": _refusals(),
            "offload": offloading() if DEEPSEEK.name in per else None,
            "options": opts, "inputs": inputs(), "gpus": gpus(), "features": [[f, list(v)] for f, v in features()],
            "search": searched["data"], "search_js": searched["js"]}


#: The released models' configs after DeepSeek-V3 (paper/models/, each with its source; the Megatron-Core proxies
#: left out), which the page offers beside DeepSeek's presets: every family memsym reads.
RELEASED = ("deepseek-v3.2-exp", "glm-5", "kimi-k2", "deepseek-v4-flash", "deepseek-v4-pro")


def released_models() -> List:
    """(``paper/models/<name>.json``, ModelSpec) of :data:`RELEASED`, read as ``memsym estimate --model`` reads them
    (``paper/`` is the repository's folder in a checkout, the package ``memsym_paper`` in a wheel)."""
    from derivations.config.presets import load_model
    from symbolic.resources import PAPER_DIR
    return [(f"paper/models/{name}.json", load_model(str(PAPER_DIR / "models" / f"{name}.json"))) for name in RELEASED]


def _distinct(models) -> List:
    """(argument, spec) pairs, a model the page would evaluate as an earlier one (the same file named twice: its
    :func:`model_data`, which leaves out where it was read from) left out."""
    out, seen = [], []
    for argument, spec in models:
        if argument not in [a for a, _ in out] and model_data(spec) not in seen:
            out.append((argument, spec))
            seen.append(model_data(spec))
    return out
