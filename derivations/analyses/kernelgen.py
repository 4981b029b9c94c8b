"""Printing the search's kernels (``python -m derivations.generate``; imports sympy).

A component term is a polynomial in the row symbols (:data:`ROWS`: the layout's degrees and their reciprocals,
b, s, the stage composition and a family's own counts) with coefficients in the model's dimensions and bytes.
Per family one module, ``derivations/generated/<family>_search.py``, holds per group of terms (model states,
activations, the step's moments), each distinct function once:

* ``<group>_coefficients_<i>(v)``: the distinct coefficients, exact Python (:func:`symbolic.codegen.python`);
* ``<group>_<i>(c0, ..., cn, <rows>)``: the terms as numpy code (lambdify's printer,
  :func:`symbolic.numeric.compile`) of the factored row polynomial (:func:`symbolic.numeric.factored`);
* ``kernel(flags, attention)``: a structure's rows and each group's term ids, coefficients and kernel.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import sympy as sp

from symbolic.codegen import branch_flag, python
from symbolic.numeric import compile as compile_fn, factored, source

#: The symbols that vary by row (the layout, b, s, the stage composition), in argument order; a structure whose
#: terms read a family's own composition counts (DeepSeek's L_I) has them after these (:func:`rows_of`).
ROWS = ("CP", "DP", "EP", "ETP", "L_d", "L_m", "PP", "SP", "TP", "b", "e_E", "e_H", "s")


def rows_of(family, exprs) -> Tuple[str, ...]:
    """:data:`ROWS` and, in the family's order, those of its own composition counts the ``exprs`` read."""
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
    """(the distinct coefficients, each term as a polynomial of the rows in ``c0``, ``c1``, ...) of ``exprs``."""
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
    """The lines of ``<name>(c0, ..., cn, <rows>)``: the polynomials ``polys`` factored, as numpy code."""
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


def _choice(cases: Sequence[Tuple[Dict[str, bool], str]], used: set) -> str:
    """A Python expression of the switches giving each case's value (source text) where its switches hold:
    conditionals on :func:`symbolic.codegen.branch_flag`, recursively (the switches read added to ``used``)."""
    if len({v for _, v in cases}) == 1:
        return cases[0][1]
    n = branch_flag(cases)
    used.add(n)
    yes = _choice([c for c in cases if c[0][n]], used)
    return f"({yes} if {n} else {_choice([c for c in cases if not c[0][n]], used)})"


def module_source(family: str, flags: Sequence[str], variants: Mapping[Tuple[Tuple[bool, ...], str], Tuple],
                  rows: Sequence[sp.Symbol]) -> str:
    """The generated search module of a family from ``variants`` ({(structure, attention): ({group: {term id:
    expression}}, the rows they read)}), each kernel taking every row of ``rows``."""
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
    used = set()
    chosen = {g: _choice(c, used) for g, c in cases.items()}
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
    """{'states': {term id: expression}, 'activations': {...}}: the terms the choices pick, sorted by id."""
    ids = {"states": set(), "activations": set()}
    for pick in choices.values():
        for comp, tid in pick.items():
            ids["activations" if comp == "activations" else "states"].add(tid)
    return {g: {t: terms[t] for t in sorted(v)} for g, v in ids.items()}


def step_id(kind: str, policy: str) -> str:
    """The search kernels' key of the paper view's step moment (derivations/assembly/step_terms.py) of a layer of
    ``kind`` (moe, dense) rebuilt under ``policy``, without its factor 'the stage has such a layer'."""
    return f"step.paper.{kind}_layer.{policy}"


def step_terms_of(model, choices: Mapping[Tuple[int, str], Mapping[str, str]],
                  attention: str = "eager") -> Dict[str, sp.Expr]:
    """{:func:`step_id`: expression} of every recomputing policy the choices hold: the paper view's moments
    (derivations/assembly/step_terms.py) in the view's activation terms, the factors 'the stage has such a layer'
    set to 1 (the page's search applies them)."""
    # lazy: the activation terms (generate only)
    from derivations.activations import view_terms
    from derivations.activations.view import View
    from derivations.assembly import step_names, step_terms as S
    from derivations.assembly.device_terms import kinds_of
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
