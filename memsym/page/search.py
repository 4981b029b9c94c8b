"""The calculator page's layout search: what it evaluates to rank layouts as ``memsym search`` does.

The page runs the search in the browser (templates/page/search.js: the enumeration, the schedules' devices and the
ranking, logic mirrored from derivations/analyses/) over JavaScript printed here from the same sympy expressions
the command line's evaluators are printed from:

* the search's kernels (derivations/analyses/kernelgen.py, ``python -m derivations.generate``): per kernel module of
  ``derivations.generated.SEARCH_KERNELS`` (a structure and an attention kernel), the terms every (ZeRO stage,
  recomputation policy) choice uses, split as the kernels split them into exact coefficients (printed over the
  page's BigInt rationals, :func:`memsym.page.codegen.js`, converted once to floats as the command line converts
  them) and a polynomial of the row symbols in its factored form with common subexpressions (floats, sympy's
  JavaScript printer: :class:`FloatJS`), the same operations as the numpy kernels;
* the step-time model (derivations/steptime/model.py ``step_time``) of Megatron's overlap, with and without
  DualPipe, and its inputs' parameter counts (the ``params.*`` and ``static.device.*`` terms, exact);
* the Sec. 6 peak (derivations/assembly/overheads.py ``peak``) and the GPUs' published rates (gpus.toml).

Printing takes about a second of sympy; :func:`start` does it in a forked process while the rest of the page is
built (the activation tables leave the second core idle), :func:`generate` where there is no fork.
"""
from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace
from typing import Callable, Dict, List

import sympy as sp
from sympy.printing.jscode import JavascriptCodePrinter

from derivations.steptime.evaluate import DEVICE_TERMS, PARAMETER_TERMS

from .codegen import js

#: The step-time model's variants the page runs: Megatron's overlap (search's default --overlap), with DualPipe's own.
TIME_VARIANTS = (("megatron", "megatron", False), ("megatron_dualpipe", "megatron", True))
#: The terms the step-time model's inputs read (derivations/steptime/evaluate.py ``_model_constants`` and
#: ``_device_coefficients``), exact.
PARAMS, DEVICE = PARAMETER_TERMS, DEVICE_TERMS


class FloatJS(JavascriptCodePrinter):
    """sympy's JavaScript printer for the search's float evaluation: the coefficients ``c<i>`` read from the array
    ``c``, x**2 as one product and x**-1 as a division (what numpy computes for them: its fast paths), every
    other power ``Math.pow``."""

    def _print_Symbol(self, expr):
        name = expr.name
        if name[:1] == "c" and name[1:].isdigit():
            return f"c[{name[1:]}]"
        return name

    def _print_Pow(self, expr, rational=False):
        if expr.exp == 2:
            base = self.parenthesize(expr.base, 1000)
            return f"({base}*{base})"
        if expr.exp == -1:
            return "(1/" + self.parenthesize(expr.base, 1000) + ")"
        return super()._print_Pow(expr)


_FLOAT = FloatJS({"contract": False})


def _body(exprs, assign: str = "const") -> List[str]:
    """The lines computing ``exprs`` (a list): lambdify's common subexpressions (sympy.cse, list=False, as
    :func:`symbolic.numeric.compile` asks for them), then ``return [...]``."""
    cses, reduced = sp.cse(sp.Tuple(*exprs), list=False)
    lines = [f"{assign} {_FLOAT.doprint(x)} = {_FLOAT.doprint(e)};" for x, e in cses]
    lines.append("return [" + ", ".join(_FLOAT.doprint(e) for e in reduced) + "];")
    return lines


def _structure(key: str):
    from derivations.generate import STRUCTURES, structure_key
    for s in STRUCTURES:
        if structure_key(s) == key:
            return s
    raise ValueError(f"search kernels: no structure {key!r}")


def _kernel(module: str) -> Dict:
    """One kernel module of SEARCH_KERNELS, printed: {rows, terms: {group: ids}, choices, coefficients: {group: JS
    function of the substitution (exact) returning the list}, code: {group: JS function (c, rows...) -> list}}.
    The terms, their split and the coefficients' order are derivations/generate.py ``search_kernels`` and
    derivations/analyses/kernelgen.py ``group_source``'s."""
    from derivations import notation as nt
    from derivations.analyses import kernelgen
    from derivations.assembly import totals
    from derivations.config import Training
    from derivations.generate import DEEPSEEK, FAMILY, SPECIAL, _specials
    from symbolic.search import factored
    key = module[len(f"{FAMILY}_search_"):]
    attention = "flash" if key.endswith("_flash") else "eager"
    structure = _structure(key[:-len("_flash")] if attention == "flash" else key)
    base = Training(attention=attention)
    model = SimpleNamespace(structure=structure, q_lora=structure[0], family=FAMILY)
    choices = totals.choices(model, training=base)
    terms = {t: _specials(term.expr) for t, term in totals.choice_terms(model, choices, base).items()}
    rows = [nt.SYMBOLS[name] for name in kernelgen.rows_of(DEEPSEEK, terms.values())]
    groups = kernelgen.groups_of(choices, terms)
    groups["step"] = {t: _specials(e) for t, e in kernelgen.step_terms_of(model, choices, attention).items()}
    back = {sp.Symbol(k): v for k, v in SPECIAL.items()}
    out = {"rows": [r.name for r in rows], "terms": {}, "coefficients": {}, "code": {},
           "choices": {f"{z}|{r}": pick for (z, r), pick in choices.items()}}
    for g, exprs in groups.items():
        out["terms"][g] = list(exprs)
        key = (tuple(exprs.values()), tuple(rows))
        if key not in _GROUPS:  # the model states are the same under either attention kernel: printed once
            coefs: Dict = {}
            polys = []
            for e in exprs.values():
                poly = 0
                for mono, coef in kernelgen.split(e, rows).items():
                    c = coefs.setdefault(coef, sp.Symbol(f"c{len(coefs)}"))
                    poly += c * mono
                polys.append(poly)
            head = "const " + ", ".join(f"{r.name} = r.{r.name}" for r in rows) + ";"
            _GROUPS[key] = ("(e) => [" + ", ".join(js(sp.sympify(c).xreplace(back)) for c in coefs) + "]",
                            "(c, r) => {\n  " + "\n  ".join([head] + _body([factored(p) for p in polys])) + "\n}")
        out["coefficients"][g], out["code"][g] = _GROUPS[key]
    return out


#: {(a group's expressions, the rows): (its coefficients' JavaScript, its kernel's)}: printed once per process
_GROUPS: Dict = {}


def _time() -> Dict:
    """{variant: JS function (v) -> [part, ...]}, the parts in derivations/steptime/evaluate.py PARTS' order: the
    step-time model's expressions (derivations/steptime/printing.py prints the same to numpy)."""
    from derivations import notation as nt
    from derivations.steptime import model as M
    out, parts = {}, None
    for name, overlap, dualpipe in TIME_VARIANTS:
        got = M.step_time(overlap, dualpipe)
        parts = list(got)
        exprs = [nt.expand_derived(got[k]) for k in parts]
        names = sorted({x.name for e in exprs for x in e.free_symbols})
        out[name] = "(v) => {\n  const " + ", ".join(f"{n} = v.{n}" for n in names) + ";\n  " + \
            "\n  ".join(_body(exprs)) + "\n}"
    return {"variants": out, "parts": parts}


def _params() -> Dict:
    """{structure key: {P_A, ..., P_n, P_m: JS function (exact)}}: the terms of the step-time model's inputs per
    structure (the default training's: derivations/steptime/evaluate.py reads them with the paper's bytes)."""
    from derivations import config as cfg
    from derivations import variant
    from derivations.generate import STRUCTURES, FAMILY, structure_key
    out = {}
    for s in STRUCTURES:
        var = variant(SimpleNamespace(structure=s, family=FAMILY, name="{name}"), cfg.Training())
        out[structure_key(s)] = {name: f"(e) => {js(var.terms[tid].expr)}" if tid in var.terms else "(e) => Q.n(0)"
                                 for name, tid in PARAMS + DEVICE}
    return out


def _gpus() -> Dict:
    from derivations.config.gpus import presets
    return {g.key: {"capacity": g.capacity, "rates": dict(g.rates)} for g in presets().values()}


def generate() -> Dict:
    """{'data': JSON data of the search, 'js': the JavaScript source of its functions (an object literal)}."""
    from derivations import config as cfg
    from derivations.analyses import kernels
    from derivations.assembly import overheads as oh
    from derivations.config.limits import OPTIONS
    from derivations.generated import SEARCH_KERNELS
    from derivations.steptime.evaluate import DEFAULT_GPU
    from derivations.steptime.placement import DISPATCHERS
    modules = list(dict.fromkeys(SEARCH_KERNELS.values()))
    printed = {m: _kernel(m) for m in modules}
    time = _time()
    params = _params()
    total, f, buf = sp.symbols("total f buf")
    fns = ["const SEARCH_FNS = {", "kernels: {"]
    for m, k in printed.items():
        fns.append(f"{json.dumps(m)}: {{")
        fns += [f"coefficients_{g}: {src}," for g, src in k["coefficients"].items()]
        fns += [f"{g}: {src}," for g, src in k["code"].items()]
        fns.append("},")
    fns += ["},", "time: {"] + [f"{json.dumps(n)}: {src}," for n, src in time["variants"].items()] + ["},",
                                                                                                  "params: {"]
    for key, ps in params.items():
        fns.append(f"{json.dumps(key)}: {{" + ", ".join(f"{n}: {src}" for n, src in ps.items()) + "},")
    fns += ["},", f"peak: (total, f, buf) => {_FLOAT.doprint(oh.peak(total, f, buf))},", "};"]
    data = {
        "index": dict(SEARCH_KERNELS),
        "kernels": {m: {k: v for k, v in p.items() if k in ("rows", "terms", "choices")} for m, p in printed.items()},
        "policies": list(kernels.policies()), "zeros": sorted(cfg.ZERO_NAMES), "mbs": [1, 2, 4], "seq": [4096],
        "gpus_per_node": 8, "overheads": "high", "ends": {k: [str(v) for v in oh.named_values(k).values()]
                                                          for k in ("high", "low", "none")},
        "time_parts": time["parts"], "default_gpu": DEFAULT_GPU, "dispatchers": list(DISPATCHERS),
        "gpus": _gpus(), "max_gpus": 2 ** 20, "seq_limit": [OPTIONS["seq"].low, OPTIONS["seq"].high],
        "composition": list(cfg.composition_names("deepseek")),
    }
    return {"data": data, "js": "\n".join(fns)}


def start() -> Callable[[], Dict]:
    """:func:`generate` in a worker process (concurrent.futures; the page's other work goes on meanwhile); returns the
    function that waits for it and gives its answer."""
    pool = ProcessPoolExecutor(max_workers=1)
    future = pool.submit(generate)
    pool.shutdown(wait=False)  # (the worker finishes the one task it has)
    return future.result
