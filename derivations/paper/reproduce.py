"""Recompute every printed number of the paper (``paper/printed.toml``), exactly and through the lambdified numpy
functions, and judge it."""
from __future__ import annotations

from fractions import Fraction
from typing import List

from derivations import config as cfg
from symbolic import numeric
from derivations.notation import B_w
from derivations.paper.reference import Result, judge, load

from derivations import build


def _resolve(meta, entry):
    model = cfg.load_model(meta.get("model", "deepseek-v3"))
    layout = cfg.Layout(**dict(meta.get("layout", {})))
    tr = dict(meta.get("training", {}))
    at = dict(entry.at)
    for k in ("mbs", "seq", "zero", "recompute"):
        if k in at:
            tr[k] = at.pop(k)
    training = cfg.Training(**tr)
    if "layers" in at:
        first, last = at.pop("layers")
        comp = cfg.layer_range(model, first, last)
    elif "stage" in at:
        comp = cfg.stage(model, layout, at.pop("stage"))
    else:
        comp = cfg.whole_model(model)
    if at:
        raise ValueError(f"entry {entry.id}: unknown keys in at: {sorted(at)}")
    return model, cfg.substitution(model, layout, training, comp)


def _expr(terms, ref: str):
    tid, _, key = ref.partition(":")  # a term, or one part of it (``id:part``)
    t = terms[tid]
    return (t.part(key).expr if key else t.expr), t.unit


def run(path=None) -> List[Result]:
    meta, entries = load(path)
    results = []
    for e in entries:
        model, subs = _resolve(meta, e)
        terms = build(model)
        total, num, unit = Fraction(0), 0.0, None
        for ref in e.terms:
            expr, u = _expr(terms, ref)
            if unit is not None and u != unit:
                raise ValueError(f"entry {e.id}: mixes units {unit} and {u}")
            unit = u
            total += numeric.exact(expr, subs)
            num += float(numeric.evaluate(expr, subs))
        results.append(judge(e, total, num, unit, subs[B_w]))
    return results
