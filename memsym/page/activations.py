"""The calculator page's activation tables: each tensor of the Sec. 5 lists with what the view keeps of it.

Every tensor of the lists (``derivations.inventory.SPECS``, a family's own) gets a table of what the view
(``derivations.views``) makes of it, by the recomputation policy and the values of the features that can change that
tensor: derivations/generate.py's rule (``tensor_features``, which the command line's decision tables are filled
by), read from the tensor's tags.  The table is filled by calling ``views._kept`` over those features; the tests
check it against the views' own sums (:func:`check_activations`).  The expressions are added to the page's
:class:`memsym.page.data.Pool` (printed to JavaScript and MathML by :mod:`memsym.page.codegen`); nothing here writes
a formula.
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Dict, List, Tuple

import sympy as sp

from derivations import config as cfg

RC = ("none", "selective", "full", "custom")


def features() -> List[Tuple[str, Tuple]]:
    """The view's features: (name, (values...)), a switch's values in order; recompute is categorical (RC)."""
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
    conv = cfg.Conventions(**{k: val(k) for k, s in cfg.CONVENTION_SWITCHES.items()
                              if s.side in ("activations", "both")})
    return View(rc, ops, val("attention"), bool(val("fp8")), conv)


@lru_cache(maxsize=None)
def _view(rc: str, assign: Tuple):
    """:func:`make_view` of ``assign``'s (feature, value) pairs, each view built once."""
    return make_view(rc, dict(assign))


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
        for spec in fam.activation_specs(kind, flags):
            if isinstance(spec, Group):
                for key, label, num, den, tags in spec.subs:
                    yield (kind, f"{spec.key}.{key}", f"{spec.label.split(':')[0]}: {label}", spec.count, tuple(num),
                           tuple(den), tuple(spec.tags) + tuple(tags))
            else:
                yield (kind, spec.key, spec.label, 1, tuple(spec.num), tuple(spec.den), tuple(spec.tags))


@lru_cache(maxsize=None)
def _product(count, n, d):
    """count x prod(n) / prod(d) as sympy builds it (memoised: the same factors recur across views and tensors)."""
    return sp.sympify(count) * sp.Mul(*[sp.sympify(f) for f in n]) / sp.Mul(*[sp.sympify(f) for f in d])


@lru_cache(maxsize=None)
def _exists() -> Dict:
    """{tag: the features its EXISTS rule reads} (derivations/generate.py ``exists_features``), found once."""
    # lazy: sympy (only this path needs it)
    from derivations.generate import exists_features
    return exists_features()


def tensor_features(tags) -> List[str]:
    """The features that can change what a view keeps of a tensor with ``tags``, in :func:`features`' order:
    derivations/generate.py's rule (``tensor_features``), recompute left out (every table is by policy)."""
    # lazy: sympy (only this path needs it)
    from derivations.generate import tensor_features as rule
    got = set(rule(tags, _exists()))
    return [f for f, _ in features() if f in got]


def policy_features(feats, rc: str) -> List[str]:
    """The features of a tensor's table under the policy ``rc``: the recomputed operators under custom only."""
    return list(feats) if rc == "custom" else [f for f in feats if not f.startswith("op:")]


@lru_cache(maxsize=None)
def _unit_table(count, num, den, tags) -> Tuple[List[str], Dict[str, List]]:
    """(the features of a tensor, {policy: [the expression kept or None, ...]}), each list over the features'
    values in itertools.product order (the first feature slowest); memoised (the lists of several shapes share
    most tensors)."""
    # lazy: sympy (only this path needs it)
    from derivations.activations.views import _kept
    feats = tensor_features(tags)
    values = dict(features())
    table = {}
    for rc in RC:
        fs = policy_features(feats, rc)
        table[rc] = []
        for vals in itertools.product(*(values[f] for f in fs)):
            got = _kept(_view(rc, tuple(zip(fs, vals))), num, den, tags)
            table[rc].append(None if got is None else _product(count, got[0], got[1]))
    return feats, table


def activation_units(pool, shape) -> List[Dict]:
    """The tensors of ``shape`` (DeepSeek's q_lora flag, or another family's Shape), each with its table
    (:func:`_unit_table`, the expressions as ``pool`` indices)."""
    out = []
    for kind, key, label, count, num, den, tags in units(shape):
        feats, entries = _unit_table(count, num, den, tags)
        table = {rc: [None if e is None else pool.add(e) for e in exprs] for rc, exprs in entries.items()}
        out.append({"kind": kind, "key": key, "label": label, "feats": feats, "table": table})
    return out
