"""What the calculator page evaluates, printed from the derivation's terms (exact JavaScript and MathML:
:mod:`memsym.page.codegen`; the generated assembly: :func:`assembly_js`); nothing here writes a formula."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Tuple

import sympy as sp

from derivations import config as cfg
from derivations import generated, variant
from derivations import notation as nt
from derivations.activations import shape as shapes
from derivations.assembly import device_terms as dt, offload, overheads as oh, quantized
from derivations.assembly import step_names, step_terms as stt
from derivations.assembly.sides import weight_side, weight_side_of
from derivations.config.presets import PRESET_NAMES, load_model
from derivations.config.quantization import FORMATS
from symbolic.errors import ConfigError
from symbolic.resources import PAPER_DIR

from ..lines import one_line
from . import search
from .codegen import js, mathml, symbols_of
from .options import DEEPSEEK, gpus, inputs, options
from .pyjs import module_js
from symbolic.exact import exact_text
from derivations.generate import FEATURES, activation_specs, device_shape, exists_features, python_module
from derivations.families import get as _family


class Pool:
    """Distinct expressions, each printed once: index -> JavaScript function and MathML."""

    def __init__(self):
        self.index: Dict[Tuple, int] = {}
        self.fns: List[str] = []
        self.mls: List[str] = []
        self.exprs: List[sp.Expr] = []
        self.reads: List[List[str]] = []

    def add(self, expr, display=None) -> int:
        expr = sp.sympify(expr)
        key = (expr, None if display is None else sp.sympify(display))
        if key not in self.index:
            self.index[key] = len(self.fns)
            self.fns.append(f"(e) => {js(expr)}")
            self.exprs.append(expr)
            self.mls.append(mathml(expr if display is None else display))
            self.reads.append(sorted(symbols_of(expr)))
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
    """{structure key: {side: {ids: {zero: {component: id}}, terms: {id: fn}, P_n, P_m}}} of every structure of
    ``fam`` (its flags' values, :meth:`Family.structure_key`), but the weight sides it has no terms for."""
    out = {}
    for structure in fam.structures():
        model = SimpleNamespace(structure=structure, family=fam.name, name=fam.name)
        per = {}
        for rank, shared in SIDES:
            tr = _side_training(rank, shared)
            try:
                weight_side_of(model, tr.conventions)
            except ConfigError:  # none: the page refuses it with the printed sides.weight_side_of
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
    terms = SimpleNamespace(term=lambda tid: var.terms[tid].expr)
    return quantized.linear_params(terms, {k: nt.SYMBOLS[k] for k in ("e_E", "e_H", "L_m", "N", "h")}, params_id)


def device(pool: Pool, fam=DEEPSEEK) -> Dict:
    """What the page shows and reads of ``fam``'s per-device assembly (device_terms.py; run as :func:`assembly_js`):
    {kinds: {kind: symbol}, chunks, stage: {view variant: act.stage}, layer} and the step's moments (:func:`step`)."""
    shape = device_shape(fam)
    return {"kinds": dict(dt.kinds_of(shape)), "chunks": dt.CHUNKS,
            "stage": {f"mtp{int(mtp)}full{int(full)}": pool.add(dt.activation_terms(mtp, full, shape)["stage"])
                      for mtp, full in itertools.product((False, True), repeat=2)},
            "layer": pool.add(dt.activation_terms(False, False, shape)["layer"]), **step(pool)}


def step(pool: Pool) -> Dict:
    """The step's moments (step_terms.py) in their order (the first largest binds, device.step_excess): {step:
    {framework: {policy: [[moment, function, term id], ...]}}, step_policy, step_none, step_indicators}."""
    for name, (option, value) in step_names.INDICATORS.items():
        values = cfg.ATTENTION if option == "attention" else cfg.CONVENTION_SWITCHES[option].values
        if value not in values:
            raise ValueError(f"step_names.INDICATORS: {name} reads {option} = {value!r}, not one of {values}")
    moments = {fw: {pol: [[name, pool.add(term.expr), term.id] for name, term in stt.moments(fw, pol).items()]
                    for pol in step_names.POLICIES} for fw in step_names.FRAMEWORKS}
    return {"step": moments, "step_policy": {rc: step_names.policy_of(rc) for rc in cfg.RECOMPUTE},
            "step_none": dict(step_names.NONE_OF),
            "step_indicators": {k: list(v) for k, v in step_names.INDICATORS.items()}}


def family_data(pool: Pool, fam, say) -> Dict:
    """What the page evaluates a model of ``fam`` with: its model states, activation tables (per assignment of its
    activation flags), device assembly, and its declaration (flags, letters, layout rules and defaults, MTP)."""
    acts, by_tag = {}, exists_features()
    for flags in fam.activation_flag_sets():
        shown = f" ({', '.join(f'{k}={v}' for k, v in flags.items())})" if flags else ""
        say(f"{fam.title}: activation tables{shown}")
        acts[fam.activation_key(flags)] = activation_tables(pool, fam, flags, by_tag)
    say(f"{fam.title}: model states and the device assembly")
    return {"title": fam.title, "short": fam.short, "flags": list(fam.flags), "letters": fam.letters,
            "late_flags": list(fam.late_flags),
            "counts": [[sym, feature] for sym, feature, _ in fam.counts], "named_counts": list(fam.named_counts),
            "activation_flags": list(fam.activation_flags),
            "states": model_states(pool, fam), "activations": acts, "device": device(pool, fam),
            "kinds": list(fam.kinds), "sections": list(fam.sections), "layout_defaults": fam.layout_defaults(),
            "layer_label": fam.layer_name or ("one MoE layer" if "moe" in fam.layer else f"one {fam.layer_what}"),
            "divides": [[d.rule, d.symbol, d.axis, d.text] for d in fam.divides],
            "inert": _inert(fam)}


def activation_tables(pool: Pool, fam, flags: Dict, by_tag: Dict) -> List[Dict]:
    """Every tensor of ``fam``'s lists under ``flags`` with generate.activation_specs' decision table: {kind, key,
    feats, table: {policy: [expression or None (not kept), ...]}} (:func:`_by_policy`), a group's count in."""
    found: List[sp.Expr] = []
    adder = SimpleNamespace(add=lambda expr: found.append(sp.sympify(expr)) or len(found) - 1)
    out = []
    for kind, specs in activation_specs(adder, by_tag, fam, (flags,))[fam.activation_key(flags)].items():
        for spec in specs:
            group = spec[0] == "G"  # ["G", key, count, [[key, feats, table], ...]] or ["P", key, feats, table]
            count = found[spec[2]] if group else 1
            subs = [[f"{spec[1]}.{k}", *rest] for k, *rest in spec[3]] if group else [spec[1:]]
            for key, feats, table in subs:  # feats[0]: recompute (every table is by policy)
                out.append({"kind": kind, "key": key, "feats": feats[1:], "table": {
                    rc: [None if i is None else pool.add(count * found[i]) for i in _by_policy(table, feats, rc)]
                    for rc in FEATURES["recompute"]}})
    return out


def _by_policy(table: Dict, feats: List[str], rc: str):
    """A decision table's entries under policy ``rc`` over the other features' values in itertools.product order
    (the operators under custom only): an index or None (not kept)."""
    fs = [f for f in feats[1:] if rc == "custom" or not f.startswith("op:")]
    for vals in itertools.product(*(FEATURES[f] for f in fs)):
        at = dict(zip(fs, vals), recompute=rc)
        yield table.get("|".join(at.get(f, "0") for f in feats))


def _inert(fam) -> Dict:
    """{fp8: FP8 caching retypes none of the family's tensors, ops: the custom recomputation operators naming none}."""
    fp8, ops = shapes.inert(shapes.of(fam.name, fam.structures()[0]))
    return {"fp8": fp8, "ops": list(ops)}


# ----------------------------------------------------------------------------- schedules, overheads
def overheads(pool: Pool) -> Dict:
    """The Sec. 6 ends (overheads.py) and the peak of each at the step's total, which the verdict judges."""
    step_total = sp.Symbol("step_total", nonnegative=True)
    ends = {end: oh.named_values(end) for end in ("low", "high")}
    return {"ends": {end: {k: exact_text(v) for k, v in o.items()} for end, o in ends.items()},
            "step_peak": {end: pool.add(oh.peak(step_total, sp.Rational(o["f_frag"]), sp.Rational(o["M_buf"])))
                          for end, o in ends.items()}}


def model_data(spec) -> Dict:
    """A model the command line read (``memsym page --model FILE``) as the page evaluates it: family, name,
    structure, layer kinds, each layer's and an MTP module's features (ModelSpec.layer_features: DeepSeek's DSA
    indexer) and ModelSpec.named() as decimal strings."""
    features = spec.layer_features() if hasattr(spec, "layer_features") else [()] * spec.l
    mtp = spec.mtp_layer_features() if hasattr(spec, "mtp_layer_features") else ()
    return {"family": spec.family, "name": spec.name, "structure": [bool(x) for x in spec.structure], "l": spec.l,
            "kinds": list(spec.layer_kinds()), "features": [sorted(f) for f in features],
            "mtp_features": sorted(mtp), "named": {k: str(v) for k, v in spec.named().items()},
            "tie_word_embeddings": bool(getattr(spec, "tie_word_embeddings", False)),
            "mtp_layers": int(getattr(spec, "mtp_layers", 0))}


def generate(models=(), progress=None) -> Dict:
    """Everything the page needs (functions, MathML, option data) for DeepSeek's presets and a pasted config.json,
    or for ``models`` ((``--model`` text, ModelSpec) pairs of any family); ``progress``: told each step."""
    pool, say = Pool(), progress or (lambda text: None)
    # a path's control and bidirectional characters as their codes (memsym/lines.py): the page shows the argument
    models = _distinct([(one_line(argument), spec) for argument, spec in models])
    fams = [DEEPSEEK] if not models else []
    released = released_models() if not models else []
    for _, spec in list(models) + released:
        fam = _family(spec.family)
        if fam not in fams:
            fams.append(fam)
    per = {fam.name: family_data(pool, fam, say) for fam in fams}
    ds = DEEPSEEK.name in per
    say("schedules, overheads, options")
    over = overheads(pool)
    opts = options()
    say("the layout search's step-time model")
    searched = search.generate()
    given = {argument: model_data(spec) for argument, spec in models}
    # DeepSeek's presets read by the command line's reader, as `memsym estimate --model NAME` reads them; on a page of
    # given models only those (no preset, no pasted config.json)
    opts["presets"] = {} if models else {n: model_data(load_model(n)) for n in PRESET_NAMES}
    if models:
        opts["default_model"] = next(iter(given))
    return {"fns": pool.fns, "mathml": pool.mls, "reads": pool.reads, "families": per,
            "models": given, "released": {argument: model_data(spec) for argument, spec in released},
            "overheads": over,
            # --offload-activations, --linear-recipe: where DeepSeek's tensors are read (offload.py, quantized.py)
            "offload": {"modules": list(cfg.OFFLOAD_MODULES), "moment": offload.MOMENT} if ds else None,
            "linear_recipes": list(FORMATS) if ds else None,
            "options": opts, "inputs": inputs(), "gpus": gpus(), "features": FEATURES,
            "search": searched["data"], "search_js": searched["js"] + "\n" + assembly_js(fams)}


def assembly_js(fams) -> str:
    """``FNS`` (``FNS_OF`` over the page's exact rationals ``Q``; the search's over floats) and ``const ASSEMBLY =
    {family: {inflight, device, ...}}``: each family's generated module (derivations/generated/<family>.py, else
    generate.python_module) in exact JavaScript (:mod:`memsym.page.pyjs`)."""
    out = []
    for fam in fams:
        path = Path(generated.__file__).parent / f"{fam.name}.py"
        source = path.read_text(encoding="utf-8") if path.exists() else python_module(fam)
        out.append(f"{json.dumps(fam.name)}: {module_js(source, lambda name: True, ['inflight', 'device', 'DEVICE'])}")
    return "const FNS = FNS_OF(Q);\nconst ASSEMBLY = {\n" + ",\n".join(out) + "\n};"


#: The released models' configs after DeepSeek-V3 (paper/models/), offered beside DeepSeek's presets: every family.
RELEASED = ("deepseek-v3.2-exp", "glm-5", "kimi-k2", "deepseek-v4-flash", "deepseek-v4-pro")


def released_models() -> List:
    """(``paper/models/<name>.json``, ModelSpec) of :data:`RELEASED`, read as ``memsym estimate --model`` reads them."""
    return [(f"paper/models/{name}.json", load_model(str(PAPER_DIR / "models" / f"{name}.json"))) for name in RELEASED]


def _distinct(models) -> List:
    """(argument, spec) pairs without a model the page would evaluate as an earlier one (its :func:`model_data`)."""
    out, seen = [], []
    for argument, spec in models:
        if argument not in [a for a, _ in out] and model_data(spec) not in seen:
            out.append((argument, spec))
            seen.append(model_data(spec))
    return out
