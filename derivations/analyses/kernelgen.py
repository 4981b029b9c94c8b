"""Printing the search's kernels (run by ``python -m derivations.generate``; imports sympy).

The search (derivations/analyses/evaluation.py) evaluates the per-device component terms of every
(ZeRO stage, recomputation policy) choice (derivations/assembly/totals.py ``choices`` and
``choice_terms``) over millions of rows.  A term is a polynomial in the symbols that vary by row (the
layout's degrees and their reciprocals, b, s and the stage composition L_d, L_m, e_E, e_H and a family's own
counts; :data:`ROWS`, :func:`rows_of`) whose coefficients are polynomials in the model's dimensions and the bytes per
element.  For a family this module prints one Python module, ``derivations/generated/<family>_search.py``,
holding per group of terms (the model states, the activations, the step's moments) of every structure under
each attention kernel, each distinct function once:

* ``<group>_coefficients_<i>(v)``: the distinct coefficients, exact Python (integers and
  ``fractions.Fraction``) printed by :func:`symbolic.codegen.python` from a substitution by name
  (each value bound once to a local name);
* ``<group>_<i>(c0, ..., cn, <rows>)``: the terms as numpy code, sympy's own printer
  (``sympy.lambdify``'s NumPy printer with common subexpressions, :func:`symbolic.numeric.compile`)
  of the row polynomial in its factored (multivariate Horner) form (:func:`symbolic.search.factored`),
  the coefficients as scalar arguments;
* ``kernel(flags, attention)``: a structure's (its flags as booleans, the attention kernel): its rows and
  each group's term ids, coefficients and kernel, as conditionals on the flags they depend on.

Each function is printed from one structure's terms alone: the flags choose a function and are never multiplied
into a float, so a structure's numbers are those of its own terms' kernels, to the bit.

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

#: The symbols that vary by row (the layout, b, s, the stage composition), in argument order; a structure whose
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


def group_split(exprs: Sequence[sp.Expr], rows: Sequence[sp.Symbol]) -> Tuple[Tuple[sp.Expr, ...], Tuple[sp.Expr, ...]]:
    """(the distinct coefficients, each term as a polynomial of the rows in ``c0``, ``c1``, ...) of the terms
    ``exprs``: a coefficient is named by its first appearance."""
    coefs: Dict[sp.Expr, sp.Symbol] = {}
    polys = []
    for e in exprs:
        poly = 0
        for mono, coef in split(e, rows).items():
            c = coefs.setdefault(coef, sp.Symbol(f"c{len(coefs)}"))
            poly += c * mono
        polys.append(poly)
    return tuple(coefs), tuple(polys)


def coefficients_source(name: str, group: str, coefs: Sequence[sp.Expr]) -> List[str]:
    """The lines of ``<name>(v)``: the coefficients ``coefs`` of ``group``'s terms, exact Python."""
    # each value read once into a local name: shorter source, compiled when the search imports it
    names = sorted({x.name for coef in coefs for x in sp.sympify(coef).free_symbols})
    local = all(n.isidentifier() for n in names)
    lines = [f"def {name}(v):",
             f'    """The {len(coefs)} coefficients of ``{group}`` at the substitution ``v`` (exact)."""']
    lines += [f'    _{n} = v["{n}"]' for n in names] if local else []
    lines += ["    return ("]
    lines += [f"        {python(coef, local=local)}," for coef in coefs]
    return lines + ["    )"]


def kernel_source(name: str, polys: Sequence[sp.Expr], rows: Sequence[sp.Symbol]) -> List[str]:
    """The lines of ``<name>(c0, ..., cn, <rows>)``: the polynomials ``polys`` as numpy code, sympy's own printer
    of their factored form (:func:`symbolic.numeric.compile`)."""
    coefs = sorted({x for p in polys for x in p.free_symbols if x not in set(rows)}, key=lambda c: int(c.name[1:]))
    fn = compile_fn(sp.Tuple(*[factored(p) for p in polys]), list(coefs) + list(rows))
    src = source(fn).replace("def _lambdifygenerated(", f"def {name}(", 1)
    if f"def {name}(" not in src:
        raise ValueError("search kernel: lambdify's source changed shape")
    return src.rstrip("\n").split("\n")


def _check(groups: Mapping[str, Mapping[str, sp.Expr]], rows: Sequence[sp.Symbol]) -> None:
    names = tuple(r.name for r in rows)
    if names[:len(ROWS)] != ROWS:
        raise ValueError(f"search kernel: rows {names} do not start with {ROWS}")
    for tid, e in groups.get("states", {}).items():  # the search evaluates them once per layout
        if {x.name for x in e.free_symbols} & {"b", "s"}:
            raise ValueError(f"search kernel: the model states' {tid} depends on b or s")


def _choice(cases: Sequence[Tuple[Dict[str, bool], str]], names: Sequence[str], used: set) -> str:
    """A Python expression of the switches ``names`` giving each case's value (source text) where the case's
    switches hold: a conditional on the first switch whose value alone changes the answer, recursively (the
    switches it reads are added to ``used``)."""
    values = list(dict.fromkeys(v for _, v in cases))
    if len(values) == 1:
        return values[0]

    def matters(n):
        by = {}
        for at, v in cases:
            by.setdefault(tuple(x for k, x in at.items() if k != n), set()).add(v)
        return any(len(vs) > 1 for vs in by.values())
    n = next((n for n in names if matters(n)), None) or next(n for n in names if len({at[n] for at, _ in cases}) > 1)
    used.add(n)
    yes = _choice([c for c in cases if c[0][n]], names, used)
    no = _choice([c for c in cases if not c[0][n]], names, used)
    return f"({yes} if {n} else {no})"


def module_source(family: str, flags: Sequence[str], variants: Mapping[Tuple[Tuple[bool, ...], str], Tuple],
                  rows: Sequence[sp.Symbol]) -> str:
    """The generated search module of a family: every distinct group of coefficients and every distinct kernel of
    the ``variants`` ({(structure, attention): (groups, the rows they read)}; groups: {group: {term id:
    expression}}) printed once, each kernel taking every row of ``rows`` (the family's, in order: a structure's
    kernels read only its own rows), and ``kernel(flags, attention)`` choosing a structure's by its flags."""
    coef_names: Dict[Tuple, str] = {}
    kernel_names: Dict[Tuple, str] = {}
    body: List[str] = []
    cases: Dict[str, List] = {}
    for (structure, attention), (groups, own) in variants.items():
        _check(groups, own)
        at = {**dict(zip(flags, structure)), "flash": attention == "flash"}
        cases.setdefault("rows", []).append((at, repr(tuple(r.name for r in own))))
        for g, terms in groups.items():
            coefs, polys = group_split(list(terms.values()), rows)
            if (g, coefs) not in coef_names:
                coef_names[(g, coefs)] = name = f"{g}_coefficients_{sum(k[0] == g for k in coef_names)}"
                body += ["", ""] + coefficients_source(name, g, coefs)
            if (g, polys) not in kernel_names:
                kernel_names[(g, polys)] = name = f"{g}_{sum(k[0] == g for k in kernel_names)}"
                body += ["", ""] + kernel_source(name, polys, rows)
            for part, src in (("terms", repr(tuple(terms))), ("coefficients", coef_names[(g, coefs)]),
                              ("kernel", kernel_names[(g, polys)])):
                cases.setdefault((g, part), []).append((at, src))
    names, used = list(flags) + ["flash"], set()
    chosen = {g: _choice(c, names, used) for g, c in cases.items()}
    head = ['"""GENERATED by ``python -m derivations.generate`` from the terms of derivations/ (family '
            f'{family}); do not edit.', "",
            "The search's kernels (derivations/analyses/kernelgen.py) of every structure of the family under each",
            "attention kernel: per group of terms, its coefficients as exact Python and the terms as numpy code of",
            "the row symbols and those coefficients, each distinct one printed once; ``kernel`` chooses a",
            'structure\'s by its flags."""',
            "from fractions import Fraction as _Q  # noqa: F401 (used when a coefficient is a fraction)",
            "from math import floor as _floor  # noqa: F401 (used when a coefficient has a floor)", "",
            "#: The row symbols every kernel takes, in argument order.",
            f"ROWS = {tuple(r.name for r in rows)!r}"]
    tail = ["", "", "def kernel(flags, attention):",
            '    """(the rows the terms read, {group: (term ids, coefficients, kernel)}) of the structure whose flags',
            "    are ``flags`` ({flag: bool}) under ``attention``'s kernel (eager or flash).\"\"\"",
            *[f'    {n} = flags["{n}"]' for n in flags if n in used],
            *(['    flash = attention == "flash"'] if "flash" in used else []),
            f"    return {chosen['rows']}, {{"]
    for g in dict.fromkeys(k[0] for k in chosen if k != "rows"):
        tail += [f"        {g!r}: (", *[f"            {chosen[(g, part)]},"
                                        for part in ("terms", "coefficients", "kernel")], "        ),"]
    tail += ["    }"]
    return "\n".join(head + body + tail) + "\n"


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
