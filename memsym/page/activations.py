"""The calculator page's activation tables: each tensor of the Sec. 5 lists with what the view keeps of it.

Every tensor of the lists (``derivations.inventory.SPECS``, a family's own) gets a table of what the view
(``derivations.views``) makes of it, keyed by the recomputation policy and the values of the features that change
that tensor: the table is filled by calling ``views._kept`` over those features (found by probing), then checked
against the views' own sums by the tests (:func:`check_activations`).  The expressions are added to the page's
:class:`memsym.page.data.Pool` (printed to JavaScript and MathML by :mod:`memsym.page.codegen`); nothing here writes
a formula.
"""
from __future__ import annotations

import itertools
import random
from typing import Dict, List, Tuple

import sympy as sp

from derivations import config as cfg

RC = ("none", "selective", "full", "custom")


def features() -> List[Tuple[str, Tuple]]:
    """The view's features: (name, (values...)), a switch's values in order (at most 10: the page's table keys
    are one digit per feature); recompute is categorical (RC)."""
    out = [("attention", tuple(cfg.ATTENTION)), ("fp8", (False, True))]
    out += [(k, s.values) for k, s in cfg.CONVENTION_SWITCHES.items() if s.side in ("activations", "both")]
    out += [(f"op:{o}", (False, True)) for o in cfg.RECOMPUTE_OPS]
    return out


def make_view(rc: str, assign: Dict):
    """The derivations View of a recompute policy and feature values (absent: the first value)."""
    # lazy: sympy (only this path needs it)
    from derivations.activations.views import View
    feats = dict(features())
    val = lambda f: assign.get(f, feats[f][0])
    ops = tuple(o for o in cfg.RECOMPUTE_OPS if val(f"op:{o}")) if rc == "custom" else ()
    conv = cfg.Conventions(**{k: val(k) for k, s in cfg.CONVENTION_SWITCHES.items() if s.side in ("activations", "both")})
    return View(rc, ops, val("attention"), bool(val("fp8")), conv)


def shape_of(fam, flags: Dict):
    """What the activation modules take for ``flags`` (derivations/activations/shape.py ``of``): the other
    structure flags, on which no tensor list depends, at their first value."""
    # lazy: sympy (only this path needs it)
    from derivations.activations import shape as shapes
    return shapes.of(fam.name, tuple(flags.get(f, True) for f in fam.flags))


def units(shape):
    """Every tensor of the lists of ``shape``'s family: (kind, key, label, count, num, den, tags)."""
    # lazy: sympy (only this path needs it)
    from derivations.activations import shape as shapes
    from derivations.activations.views import Group
    fam = shapes.family(shape)
    flags = dict(shape.flags) if shapes.is_shape(shape) else {"q_lora": shape}
    for kind in fam.kinds:
        for spec in fam.module("activations").specs(kind, flags):
            if isinstance(spec, Group):
                for key, label, num, den, tags in spec.subs:
                    yield (kind, f"{spec.key}.{key}", f"{spec.label.split(':')[0]}: {label}", spec.count, tuple(num),
                           tuple(den), tuple(spec.tags) + tuple(tags))
            else:
                yield (kind, spec.key, spec.label, 1, tuple(spec.num), tuple(spec.den), tuple(spec.tags))


def _outcome(unit, view):
    # lazy: sympy (only this path needs it)
    from derivations.activations.views import _kept
    kind, key, label, count, num, den, tags = unit
    got = _kept(view, num, den, tags)
    if got is None:
        return None
    n, d, _ = got
    return _product(count, n, d)


def _product(count, n, d, _memo={}):
    """count x prod(n) / prod(d) as sympy builds it (memoised: the same factors recur across views and tensors,
    and sympy's construction is a function of them)."""
    key = (count, n, d)
    out = _memo.get(key)
    if out is None:
        out = _memo[key] = sp.sympify(count) * sp.Mul(*[sp.sympify(f) for f in n]) / sp.Mul(*[sp.sympify(f) for f in d])
    return out


def _random_assign(rng) -> Dict:
    return {f: rng.choice(vals) for f, vals in features()}


class _Views:
    """The views of the probes and the tables, each built once (:func:`make_view` is a function of the recompute
    policy and the features' values, absent ones at their first): a view of the same values is the same object,
    numbered in the order first asked for."""

    def __init__(self):
        self.feats = features()
        self.first = [(f, vals[0]) for f, vals in self.feats]
        self.index: Dict[Tuple, int] = {}
        self.views: List = []
        #: {a tensor's (count, factors, tags): :func:`_unit_table`'s answer}
        self.units: Dict[Tuple, Tuple] = {}

    def id(self, rc: str, assign: Dict) -> int:
        key = (rc,) + tuple(assign.get(f, v0) for f, v0 in self.first)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.views)
            self.views.append(make_view(rc, assign))
        return i


_PROBES: Dict[Tuple[int, int], Tuple] = {}


def _probes(probes: int, seed: int):
    """(views, {feature: [(view id with the feature at its first value, view id at another value), ...]}): the
    pairs :func:`activation_units` compares a tensor under, in its order; the same for every tensor list (they
    read no tensor), built once per (probes, seed)."""
    if (probes, seed) not in _PROBES:
        rng = random.Random(seed)
        feats = features()
        names = dict(feats)
        # every preset's switches as a probe too: a tensor that exists only under two switches together
        # (Megatron-Core's probability-weighted product: --experts alltoall and --swiglu not fused) is seen
        presets = [{k: v for k, v in p.items() if k in names and v in names[k]}
                   for p in cfg.CONVENTION_PRESETS.values()]
        # and each with the MTP modules trained: their tensors exist only then, so that is where the other
        # switches are seen to act on them
        presets += [dict(p, mtp_activations="last-stage") for p in presets]
        bases = [{}] + presets + [_random_assign(rng) for _ in range(probes)]
        views = _Views()
        pairs = {}
        for f, vals in feats:
            rcs = ("custom",) if f.startswith("op:") else RC
            pairs[f] = [(views.id(rc, {**b, f: vals[0]}), views.id(rc, {**b, f: v}))
                        for b in bases for rc in rcs for v in vals[1:]]
            # a pair of one view twice changes nothing: left out (the comparison is of a view with itself)
            pairs[f] = [p for p in pairs[f] if p[0] != p[1]]
        _PROBES[(probes, seed)] = (views, pairs)
    return _PROBES[(probes, seed)]


def _closure(relevant: List[str], views, at) -> List[str]:
    """``relevant`` and every feature that changes the tensor once a relevant feature takes another value (from
    no switch set): a switch that acts only beside another's non-default value (Megatron-Core's router scores
    split by SP only under --router-state mcore) is found though no probe set both; repeated until nothing new.
    In the features' order."""
    values = dict(views.feats)
    found = set(relevant)
    while True:
        new = set()
        for g in sorted(found):
            for v in values[g][1:]:
                for f, vals in views.feats:
                    if f in found or f in new or f == g:
                        continue
                    rcs = ("custom",) if f.startswith("op:") or g.startswith("op:") else RC
                    if any(at(views.id(rc, {g: v, f: vals[0]})) != at(views.id(rc, {g: v, f: w}))
                           for rc in rcs for w in vals[1:]):
                        new.add(f)
        if not new:
            return [f for f, _ in views.feats if f in found]
        found |= new


def _unit_table(unit, views, pairs):
    """(the features that change ``unit``, [(table key, expression or None), ...]) of one tensor; a function of its
    count, factors and tags (memoised by them: the lists of several shapes share most tensors)."""
    _, _, _, count, num, den, tags = unit
    memo = views.units
    key = (count, num, den, tags)
    if key in memo:
        return memo[key]
    outcome: Dict[int, object] = {}

    def at(i):
        if i not in outcome:
            outcome[i] = _outcome(unit, views.views[i])
        return outcome[i]
    relevant = [f for f, _ in views.feats if any(at(a) != at(b) for a, b in pairs[f])]
    relevant = _closure(relevant, views, at)
    table = []
    values = dict(views.feats)
    for rc in RC:
        fs = relevant if rc == "custom" else [f for f in relevant if not f.startswith("op:")]
        for bits in itertools.product(*(range(len(values[f])) for f in fs)):
            assign = {f: values[f][b] for f, b in zip(fs, bits)}
            table.append((rc + "".join(str(b) for b in bits), at(views.id(rc, assign))))
    memo[key] = (relevant, table)
    return memo[key]


def activation_units(pool, shape, probes: int = 12, seed: int = 16) -> List[Dict]:
    """The tensors of ``shape`` (DeepSeek's q_lora flag, or another family's Shape), each with its table: the
    expression the view keeps, by recompute policy and the values of the features that change it.  A feature
    changes a tensor when, under one of the probes (no switch, every conventions preset, each with the MTP
    modules trained, and ``probes`` random views drawn with ``seed``) and any recompute policy, another value of it
    changes the expression kept."""
    views, pairs = _probes(probes, seed)
    out = []
    for unit in units(shape):
        relevant, entries = _unit_table(unit, views, pairs)
        table = {k: None if expr is None else pool.add(expr) for k, expr in entries}
        kind, key, label = unit[:3]
        out.append({"kind": kind, "key": key, "label": label, "feats": list(relevant), "table": table})
    return out


def evaluate_units(unit_list, rc: str, assign: Dict, pool_exprs: List) -> Dict[str, sp.Expr]:
    """{kind: sum of the kept tensors' expressions} read from the generated tables (what the page does)."""
    feats = dict(features())
    out = {}
    for u in unit_list:
        fs = u["feats"] if rc == "custom" else [f for f in u["feats"] if not f.startswith("op:")]
        key = rc + "".join(str(feats[f].index(assign.get(f, feats[f][0]))) for f in fs)
        i = u["table"][key]
        out[u["kind"]] = out.get(u["kind"], sp.Integer(0)) + (pool_exprs[i] if i is not None else 0)
    return out


def check_activations(unit_list, shape, pool_exprs: List, n: int = 200, seed: int = 1, part=(0, 1)) -> None:
    """The generated tables give every kind's term of ``n`` random views (AssertionError otherwise); ``part``
    (k, m): only the draws i with i mod m = k (the same draws: each is drawn whether checked here or not)."""
    # lazy: sympy (only this path needs it)
    from derivations.activations import shape as shapes
    from derivations.activations import view_terms
    rng = random.Random(seed)
    kinds = shapes.family(shape).kinds
    for i in range(n):
        rc, assign = rng.choice(RC), _random_assign(rng)
        if rc == "custom" and not any(assign[f"op:{o}"] for o in cfg.RECOMPUTE_OPS):
            assign["op:norm"] = True
        if i % part[1] != part[0]:
            continue
        got = evaluate_units(unit_list, rc, assign, pool_exprs)
        want = view_terms(make_view(rc, assign), shape)
        for kind in kinds:
            if kind in want:
                diff = got.get(kind, 0) - want[kind].expr
                # zero as built, or once expanded (an identity: exact), else as simplify proves it
                assert diff == 0 or sp.expand(diff) == 0 or sp.simplify(diff) == 0, (rc, assign, kind)
