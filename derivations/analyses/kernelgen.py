"""Printing the search's kernels (run by ``python -m derivations.generate``; imports sympy).

The search (derivations/analyses/evaluation.py) evaluates the per-device component terms of every
(ZeRO stage, recomputation policy) choice (derivations/assembly/totals.py ``choices`` and
``choice_terms``) over millions of rows.  A term is a polynomial in the symbols that vary by row (the
layout's degrees and their reciprocals, b, s and the stage composition L_d, L_m, e_E, e_H and a family's own
counts; :data:`ROWS`, :func:`rows_of`) whose coefficients are polynomials in the model's dimensions and the bytes per
element.  For each model structure this module prints one Python module,
``derivations/generated/<family>_search_<structure>.py`` (structures with equal kernels share one,
named after the first: ``derivations.generated.SEARCH_KERNELS``), holding per group of terms (the model
states, the activations):

* ``<group>_coefficients(v)``: the distinct coefficients, exact Python (integers and
  ``fractions.Fraction``) printed by :func:`symbolic.codegen.python` from a substitution by name
  (each value bound once to a local name);
* ``<group>(c0, ..., cn, <rows>)``: the terms as numpy code, sympy's own printer
  (``sympy.lambdify``'s NumPy printer with common subexpressions, :func:`symbolic.numeric.compile`)
  of the row polynomial in its factored (multivariate Horner) form (:func:`symbolic.search.factored`),
  the coefficients as scalar arguments.

So the run time needs neither sympy nor a cache: the coefficients are computed exactly for the
model, converted once to float64 (as lambdify prints a rational), and the row polynomial evaluated
in cache-sized blocks (:func:`symbolic.search.evaluate`).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import sympy as sp

from symbolic.codegen import python
from symbolic.numeric import compile as compile_fn, source
from symbolic.search import factored

#: The symbols that vary by row (derivations/analyses/evaluation.py ROW_NAMES), in argument order; a structure whose
#: terms read a family's own composition counts (DeepSeek's L_I) has them after these (:func:`rows_of`).
ROWS = ("CP", "DP", "EP", "ETP", "L_d", "L_m", "PP", "SP", "TP", "b", "e_E", "e_H", "s")


def rows_of(family, exprs) -> Tuple[str, ...]:
    """:data:`ROWS` and, in the family's order, those of its own composition counts (``Family.counts``) that the
    expressions ``exprs`` read: a structure without DSA's indexer keeps the rows (and kernels) it had."""
    free = {x.name for e in exprs for x in e.free_symbols}
    return ROWS + tuple(sym for sym, _, _ in family.counts if sym in free)


def split(expr, rows: Sequence[sp.Symbol]) -> Dict[sp.Expr, sp.Expr]:
    """{monomial in the row symbols (integer powers): its coefficient in the other symbols} of ``expr``."""
    out: Dict[sp.Expr, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(expr)):
        coef, mono = term.as_independent(*rows, as_Add=False)
        for f in sp.Mul.make_args(mono):
            base, ex = f.as_base_exp()
            if mono != 1 and not (base in rows and ex.is_Integer):
                raise ValueError(f"search kernel: {term} is not a polynomial in the row symbols and reciprocals")
        out[mono] = out.get(mono, 0) + coef
    return {m: c for m, c in out.items() if c != 0}


def group_source(name: str, exprs: Sequence[sp.Expr], rows: Sequence[sp.Symbol]) -> List[str]:
    """The lines of ``<name>_coefficients(v)`` and ``<name>(c0, ..., rows)`` for the terms ``exprs``."""
    coefs: Dict[sp.Expr, sp.Symbol] = {}
    polys = []
    for e in exprs:
        poly = 0
        for mono, coef in split(e, rows).items():
            c = coefs.setdefault(coef, sp.Symbol(f"c{len(coefs)}"))
            poly += c * mono
        polys.append(poly)
    # each value read once into a local name: shorter source, compiled when the search imports it
    # (~1.7 ms instead of ~3.6 for deepseek_search_q1b1t0 without bytecode files, measured)
    names = sorted({x.name for coef in coefs for x in sp.sympify(coef).free_symbols})
    local = all(n.isidentifier() for n in names)
    lines = [f"def {name}_coefficients(v):",
             f'    """The {len(coefs)} coefficients of ``{name}`` at the substitution ``v`` (exact)."""']
    lines += [f'    _{n} = v["{n}"]' for n in names] if local else []
    lines += ["    return ("]
    lines += [f"        {python(coef, local=local)}," for coef in coefs]
    lines += ["    )", "", ""]
    args = list(coefs.values()) + list(rows)
    fn = compile_fn(sp.Tuple(*[factored(p) for p in polys]), args)
    src = source(fn).replace("def _lambdifygenerated(", f"def {name}(", 1)
    if f"def {name}(" not in src:
        raise ValueError("search kernel: lambdify's source changed shape")
    lines += src.rstrip("\n").split("\n")
    return lines


def module_body(groups: Mapping[str, Mapping[str, sp.Expr]], rows: Sequence[sp.Symbol]) -> List[str]:
    """The lines of a generated module after its docstring: ``TERMS`` {group: (term id, ...)} (the outputs'
    order), ``ROWS`` (the row arguments' names) and each group's two functions.  Structures whose
    bodies are equal share one module (derivations/generate.py: search_kernels)."""
    names = tuple(r.name for r in rows)
    if names[:len(ROWS)] != ROWS:
        raise ValueError(f"search kernel: rows {names} do not start with {ROWS}")
    for tid, e in groups.get("states", {}).items():  # the search evaluates them once per layout
        if {x.name for x in e.free_symbols} & {"b", "s"}:
            raise ValueError(f"search kernel: the model states' {tid} depends on b or s")
    lines = ["from fractions import Fraction as _Q  # noqa: F401 (used when a coefficient is a fraction)",
             "from math import floor as _floor  # noqa: F401 (used when a coefficient has a floor)", "",
             f"TERMS = {{{', '.join(f'{g!r}: {tuple(ts)!r}' for g, ts in groups.items())}}}",
             f"ROWS = {names!r}", "", ""]
    for g, terms in groups.items():
        lines += group_source(g, list(terms.values()), rows) + ["", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def module_source(family: str, structure_keys: Sequence[str], body: Sequence[str]) -> str:
    """The generated module of the model structures ``structure_keys`` (one :func:`module_body`)."""
    head = ['"""GENERATED by ``python -m derivations.generate`` from the terms of derivations/ (family '
            f'{family}, structures {", ".join(structure_keys)}); do not edit.', "",
            "The search's kernels (derivations/analyses/kernelgen.py): per group of terms, its coefficients",
            'as exact Python and the terms as numpy code of the row symbols and those coefficients."""']
    return "\n".join(head + list(body)) + "\n"


def groups_of(choices: Mapping[Tuple[int, str], Mapping[str, str]], terms: Mapping[str, sp.Expr]):
    """{'states': {term id: expression}, 'activations': {...}}: the terms the choices pick, the model
    states (weights, gradients, optimizer) apart from the activations, each sorted by id."""
    ids = {"states": set(), "activations": set()}
    for pick in choices.values():
        for comp, tid in pick.items():
            ids["activations" if comp == "activations" else "states"].add(tid)
    return {g: {t: terms[t] for t in sorted(v)} for g, v in ids.items()}


def step_terms_of(model, choices: Mapping[Tuple[int, str], Mapping[str, str]],
                  attention: str = "eager") -> Dict[str, sp.Expr]:
    """{:func:`step_id`: expression} of every recomputing policy the choices hold: the paper view's moments
    (derivations/assembly/step_terms.py) with the kinds' symbols replaced by the view's activation terms,
    polynomials in the rows once the factors Min(1, L_m), Min(1, L_d), Min(1, L_d + L_m) are set to 1 (the
    search applies them: derivations/analyses/evaluation.py ``step_excess``)."""
    # lazy: the activation terms (generate only)
    from derivations.activations import view_terms
    from derivations.activations.view import View
    from derivations.assembly import step_names, step_terms as S
    from derivations.assembly.device_terms import kinds_of
    from derivations.analyses.kernels import step_id
    out = {}
    for policy in dict.fromkeys(r for _, r in choices):
        pol = step_names.policy_of(policy)
        if pol == "none":
            continue
        at = view_terms(View(policy, attention=attention), model.q_lora)
        none = view_terms(View("none", attention=attention), model.q_lora)
        for name, term in S.moments("paper", pol).items():
            expr = S.in_terms(term.expr, kinds_of(model.q_lora), at, none)
            out[step_id(name[:-len("_layer")], policy)] = expr.xreplace({S.has_moe: 1, S.has_dense: 1, S.has_layers: 1})
    return dict(sorted(out.items()))
