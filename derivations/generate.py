"""``python -m derivations.generate [--check]``: the evaluators printed from the terms into ``derivations/generated/``
(``--check``: exit 1 when regenerating would change a byte).

* ``<family>.json``: every term of every structure and weight side as an exact expression tree
  (:func:`symbolic.codegen.json_tree`; where structures differ, ``["?", flag, when set, when not]``:
  :func:`symbolic.codegen.merged`), and each activation kind's tensors as decision tables: per tensor, the view features
  it depends on and, per combination keeping it, the index of its bytes' expression. The tables are filled by the views'
  own logic (``views._kept``) and checked against it on random views before anything is written.
* ``<family>.py``: exact Python (:mod:`symbolic.codegen`) of what is not polynomial: the derived symbols, indicators,
  floor(N_r/k_g), the schedules' in-flight counts and the per-device assembly (device_terms.py)."""
from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
import json
import random
import sys
import types
from pathlib import Path
from typing import Dict, List, Tuple

import sympy as sp

from derivations import _build, evaluate, families
from derivations import notation as nt
from derivations.activations.shape import Shape
from derivations.activations.views import EXISTS, RULES, Group, View, _kept
from derivations.tensors import B_IS_1, EP_GT_1, NOT_FP32, TOPK_GT_1, V_VIEW
from derivations.assembly import printing
from derivations.assembly.conventions import side_terms
from derivations.config import CONVENTION_SWITCHES, RECOMPUTE_OPS, Conventions
from symbolic.codegen import json_tree as tree, merged, plain, python

OUT = Path(__file__).resolve().parent / "generated"
#: The family whose evaluators are committed in derivations/generated/ (the others: :func:`install`).
DEEPSEEK = families.get("deepseek")
FAMILY = DEEPSEEK.name


STRUCTURES = DEEPSEEK.structures()
#: Non-polynomial pieces of the terms, as symbols the generated ``derived`` function computes.
SPECIAL = {
    "_not_fp32": NOT_FP32, "_b_is_1": B_IS_1, "_v_view": V_VIEW, "_topk_gt_1": TOPK_GT_1, "_ep_gt_1": EP_GT_1,
    "_floor_Nr_kg": sp.floor(nt.N_r / nt.k_g),
}
ACT_SWITCHES = tuple(k for k, s in CONVENTION_SWITCHES.items() if s.side in ("activations", "both"))
OPS = tuple(RECOMPUTE_OPS)
#: The features a view is read through, in a fixed order, with their values.
FEATURES: Dict[str, Tuple[str, ...]] = {
    "recompute": ("none", "full", "selective", "custom"), "attention": ("eager", "flash"), "fp8": ("0", "1"),
    **{f"op:{o}": ("0", "1") for o in OPS},
    **{k: tuple(CONVENTION_SWITCHES[k].values) for k in ACT_SWITCHES},
}
CHECKPOINT_FEATURE_TAGS = {"layer_input", "routing", "head", "sublayer_input"}


def structure_key(structure, fam=DEEPSEEK) -> str:
    return fam.structure_key(structure)


# ----------------------------------------------------------------------------- expression trees
def family_special(fam) -> Dict[str, sp.Expr]:
    """{name: expression} of a family's own non-polynomial pieces (DeepSeek-V4: floor(s / m_C))."""
    if fam is DEEPSEEK or "activations" not in fam.sections:
        return {}
    return fam.special_symbols()


@lru_cache(maxsize=None)
def _special_symbols(fams) -> Dict[sp.Expr, sp.Symbol]:
    """{expression: its symbol} of SPECIAL and of every family's own (once per set of registered families)."""
    out = dict(SPECIAL)
    for fam in fams:
        out.update(family_special(fam))
    return {v: sp.Symbol(k) for k, v in out.items()}


def _specials(expr):
    expr = nt.expand_derived(sp.sympify(expr))
    return expr.xreplace(_special_symbols(families.all()))


def factor_tree(factors, refs: Dict):
    """``factors`` as one product tree, a factor equal to a term's expression as a reference to it."""
    out = []
    for f in factors:
        f = sp.sympify(f)
        out.append(["r", refs[f]] if f in refs else tree(_specials(f), refs))
    return out[0] if len(out) == 1 else (["*", *out] if out else 1)


class Pool:
    """Distinct trees, each stored once; equal expressions get equal indices."""

    def __init__(self):
        self.index: Dict[str, int] = {}
        self.items: List = []

    def add(self, expr) -> int:
        t = tree(_specials(expr))
        key = json.dumps(t)
        if key not in self.index:
            self.index[key] = len(self.items)
            self.items.append(t)
        return self.index[key]


# ----------------------------------------------------------------------------- views as features
def view_of(features: Dict[str, str]) -> View:
    """The view a full assignment of :data:`FEATURES` stands for."""
    ops = tuple(o for o in OPS if features.get(f"op:{o}") == "1")
    conv = Conventions(**{k: features[k] for k in ACT_SWITCHES})
    return View(features["recompute"], ops, features["attention"], features["fp8"] == "1", conv)


class _Recorder:
    """A view (or its conventions) that notes which of its features are read (what an EXISTS rule depends on)."""

    def __init__(self, view, seen: set):
        self._view, self._seen = view, seen

    def __getattr__(self, name):
        if name == "conv":
            return _Recorder(self._view.conv, self._seen)
        if name == "dropped":
            self._seen.update({"recompute", *(f"op:{o}" for o in OPS)})
        else:
            self._seen.add(name)
        return getattr(self._view, name)


def exists_features() -> Dict[str, frozenset]:
    """{tag: the features its EXISTS rule reads}, probed on views varying every feature from a few bases."""
    base = {f: vals[0] for f, vals in FEATURES.items()}
    probes = [view_of({**base, "recompute": rc, f: val}) for rc in FEATURES["recompute"]
              for f, vals in FEATURES.items() for val in vals]
    out = {}
    for tag, rule in EXISTS.items():
        seen: set = set()
        for view in probes:
            rule(_Recorder(view, seen))
        out[tag] = frozenset(seen) & set(FEATURES)
    return out


def tensor_features(tags, by_tag) -> Tuple[str, ...]:
    """The features whose value can change what a view keeps of a tensor with ``tags`` (in FEATURES order)."""
    tags = set(tags)
    feats = {"recompute", "selective"}  # an op-level selective policy decides every tensor (op_sac.py)
    if tags & CHECKPOINT_FEATURE_TAGS:
        feats.add("checkpoints")
    if "mask" in tags:
        feats.add("dropout_masks")
    feats |= {f"op:{t}" for t in tags if t in RECOMPUTE_OPS}
    if tags & {"fp8", "e5m6"}:
        feats.add("fp8")
    for tag in tags & set(by_tag):
        feats |= by_tag[tag]
    for need, switch, *_ in RULES:
        if need <= tags:
            feats.add(switch)
    return tuple(f for f in FEATURES if f in feats)


def _expr(kept) -> sp.Expr:  # the Part apply() would make: prod(num) / prod(den)
    num, den, _ = kept
    return sp.Mul(*[sp.sympify(f) for f in num]) / sp.Mul(*[sp.sympify(f) for f in den])


def decision_table(num, den, tags, feats, pool: Pool) -> Dict[str, int]:
    """{'v1|v2|...': polynomial index} of the feature values (``feats``) under which the tensor is kept."""
    base = {f: vals[0] for f, vals in FEATURES.items()}
    table = {}
    for values in itertools.product(*(FEATURES[f] for f in feats)):
        assign = {**base, **dict(zip(feats, values))}
        if assign["recompute"] != "custom" and any(assign[f"op:{o}"] == "1" for o in OPS):
            continue  # operators are recomputed only under a custom policy
        got = _kept(view_of(assign), num, den, tags)
        if got is not None:
            table["|".join(values)] = pool.add(_expr(got))
    return table


def activation_specs(pool: Pool, by_tag, fam=DEEPSEEK, flag_sets=({"q_lora": True}, {"q_lora": False})) -> Dict:
    """{activation key: {kind: [spec, ...]}} of each assignment of the activation flags."""
    out = {}
    for flags in flag_sets:
        kinds = {}
        for kind in fam.kinds:
            specs = []
            for spec in fam.activation_specs(kind, flags):
                if isinstance(spec, Group):
                    subs = []
                    for key, _label, num, den, tags in spec.subs:
                        feats = tensor_features(spec.tags + tags, by_tag)
                        subs.append([key, list(feats), decision_table(num, den, spec.tags + tags, feats, pool)])
                    specs.append(["G", spec.key, pool.add(spec.count), subs])
                else:
                    feats = tensor_features(spec.tags, by_tag)
                    specs.append(["P", spec.key, list(feats), decision_table(spec.num, spec.den, spec.tags, feats,
                                                                                pool)])
            kinds[kind] = specs
        out[fam.activation_key(flags)] = kinds
    return out


def check_tables(acts: Dict, pool: Pool, fam, flags: Dict) -> None:
    """Every table against the views' own logic on 400 random views (AssertionError on a difference)."""
    rng = random.Random(0)
    for _ in range(400):
        assign = {f: rng.choice(vals) for f, vals in FEATURES.items()}
        if assign["recompute"] != "custom":
            assign.update({f"op:{o}": "0" for o in OPS})
        view = view_of(assign)
        for qk, kinds in acts.items():
            for kind, specs in kinds.items():
                for spec, real in zip(specs, fam.activation_specs(kind, flags)):
                    pairs = ([(spec[1:], (real.num, real.den, real.tags))] if spec[0] == "P" else
                             [(sub, (num, den, real.tags + tags)) for sub, (_, _, num, den, tags)
                              in zip(spec[3], real.subs)])
                    for (key, feats, table), (num, den, tags) in pairs:
                        got = table.get("|".join(assign[f] for f in feats))
                        want = _kept(view, num, den, tags)
                        want = None if want is None else pool.add(_expr(want))
                        if got != want:
                            raise AssertionError(f"{qk} {kind} {key}: table {got}, views {want} at {assign}")


# ----------------------------------------------------------------------------- terms
def structure_terms(structure, fam=DEEPSEEK) -> Dict:
    """{term id: [[part key, [tags], tree, label], ...]} of every base and weight-side term of a structure; a factor
    equal to another term's expression is a reference to it."""
    base = _build(structure, fam.name)
    terms = {tid: base[tid] for tid in base}
    sides = [Conventions(rank=r, shared_expert=s) for r in CONVENTION_SWITCHES["rank"].values
             for s in CONVENTION_SWITCHES["shared_expert"].values] if "conventions" in fam.sections else ()
    for conv in sides:
        for t in side_terms(base, conv):
            terms.setdefault(t.id, t)
    ids = [tid for tid in terms if not any(s.name == "M_alloc" for s in sp.sympify(terms[tid].expr).free_symbols)]
    refs = {}
    for tid in ids:  # the first term of an expression names it (the registry's order: parts before sums)
        refs.setdefault(sp.sympify(terms[tid].expr), tid)
    out = {}
    for tid in ids:
        t = terms[tid]
        own = {k: v for k, v in refs.items() if v != tid}  # a term is never a reference to itself
        out[tid] = [[p.key, list(p.tags), (["*", factor_tree(p.num, own), ["^", factor_tree(p.den, own), -1]]
                                            if p.den else factor_tree(p.num, own)), p.label] for p in t.parts]
    return out


# ----------------------------------------------------------------------------- the Python module
def device_shape(fam):
    """The shape the device assembly is printed for: DeepSeek's q_lora flag, or another family's first."""
    return True if fam is DEEPSEEK else Shape(fam.name, tuple(zip(fam.flags, fam.structures()[0])))


def python_module(fam=DEEPSEEK) -> str:
    lines = ['"""GENERATED by ``python -m derivations.generate`` from the terms of derivations/ (family '
             f'{fam.name}); do not edit.', "",
             "The symbols that are not polynomial (derived symbols, storage indicators, floor) and the",
             'pipeline schedules\' in-flight counts and the per-device assembly, as exact Python; the polynomials',
             'are in the JSON beside it."""',
             "from fractions import Fraction as _Q", "from math import floor as _floor", "", "",
             "def derived(v):",
             '    """Add to ``v`` the derived symbols and non-polynomial factors whose inputs it holds."""']
    foreign = {s for other in families.all() if other is not fam and families.packaged(other.name)
               for s in getattr(other.notation(), "DERIVED", ())}  # other families' derived symbols: not printed here
    defs = [(s.name, e) for s, e in nt.DEFINITIONS.items() if s not in foreign] \
        + list(SPECIAL.items()) + list(family_special(fam).items())
    for name, expr in sorted(defs):
        need = sorted(x.name for x in sp.sympify(expr).free_symbols)
        cond = " and ".join(f'"{n}" in v' for n in need)
        lines.append(f"    if {cond}:")
        lines.append(f'        v["{name}"] = {python(expr)}')
    lines.append("    return v")
    if "activations" not in fam.sections:  # a family whose activations are not modelled: its parameters' terms only
        return "\n".join(lines) + "\n"
    lines += ["", ""] + printing.inflight_source()
    lines += ["", ""] + printing.device_source(device_shape(fam))
    lines += ["", ""] + printing.step_source()
    return "\n".join(lines) + "\n"


def tables(fam=DEEPSEEK) -> Dict[str, Dict]:
    """{``<family>.json``: the terms of every structure, the activation tables, the view features}."""
    flags = list(fam.flags)
    cases = []
    for s in fam.structures():
        terms = structure_terms(s, fam)
        plain(terms)
        cases.append((dict(zip(flags, s)), terms))
    out = {"family": fam.name, "flags": flags, "terms": merged(cases)}
    if "activations" not in fam.sections:
        return {f"{fam.name}.json": out}
    by_tag = exists_features()
    pool, acts = Pool(), []
    for flag_set in fam.activation_flag_sets():
        specs = activation_specs(pool, by_tag, fam, (flag_set,))
        check_tables(specs, pool, fam, flag_set)
        kinds = specs[fam.activation_key(flag_set)]
        plain(kinds)
        acts.append(({f: bool(flag_set[f]) for f in fam.activation_flags}, kinds))
    plain(pool.items)
    out["activations"] = {"kinds": merged(acts), "exprs": pool.items}
    out["features"] = {k: list(v) for k, v in FEATURES.items()}
    return {f"{fam.name}.json": out}


def install(fam) -> None:
    """Generate a family's evaluators in memory for :mod:`derivations.evaluate` (files not committed)."""
    module = types.ModuleType(f"derivations.generated.{fam.name}")
    exec(compile(python_module(fam), f"<generated {fam.name}>", "exec"),
         module.__dict__)  # printed above, from our terms
    evaluate.install(fam.name, tables(fam), module)


def outputs() -> Dict[Path, bytes]:
    from derivations.steptime import printing as steptime  # lazy: the step-time model (memsym page imports this)
    files = {}
    for fam in families.all():  # DeepSeek and the other families of derivations/families/: their terms and module
        if fam is DEEPSEEK or families.packaged(fam.name):
            files.update({OUT / name: json.dumps(data, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                          for name, data in tables(fam).items()})
            files[OUT / f"{fam.name}.py"] = python_module(fam).encode()
    files[OUT / f"{FAMILY}_time.py"] = steptime.module_source().encode()  # derivations/steptime/printing.py
    files[OUT / "__init__.py"] = INIT.encode()
    return files


INIT = '''"""Evaluators generated from the terms (``python -m derivations.generate``; committed, never edited by hand).

``<family>.json`` holds every term as an exact polynomial and the activation tensors as decision
tables; ``<family>.py`` the few non-polynomial symbols, the schedules' in-flight counts and the
per-device assembly.
:mod:`derivations.evaluate` reads them without sympy."""
'''


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv not in ([], ["--check"]):
        print("usage: python -m derivations.generate [--check]  (--check: exit 1 when regenerating would change a "
              "byte)", file=sys.stderr)
        return 2
    check = argv == ["--check"]
    stale = []
    files = outputs()
    for path, data in files.items():
        old = path.read_bytes() if path.exists() else None
        if old != data:
            stale.append(path)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    for path in sorted(OUT.glob("*")):  # a file no longer generated (a structure's, before one file per family)
        if path.suffix in (".py", ".json") and path not in files:
            stale.append(path)
            if not check:
                path.unlink()
    for path in stale:
        print(f"{'stale' if check else 'wrote' if path.exists() else 'deleted'}: {path.relative_to(OUT.parent.parent)} "
              f"({hashlib.sha256(path.read_bytes() if path.exists() else b'').hexdigest()[:12]})")
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
