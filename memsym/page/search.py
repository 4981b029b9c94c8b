"""The calculator page's layout search: what it evaluates to rank layouts as ``memsym search`` does.

The page runs the search in the browser (templates/page/search.js: the enumeration, the schedules' devices and the
ranking, logic mirrored from derivations/analyses/) over the functions the command line runs, written in JavaScript
from the generated modules (:mod:`memsym.page.pyjs`): the search's kernels of every structure and attention kernel
(derivations/generated/<family>_search.py, ``kernel(flags, attention)``: their coefficients exact, then floats as
derivations/analyses/kernels.py converts them), the derived symbols they read (``derived``) and the step-time
model of Megatron's overlap, with and without DualPipe (derivations/generated/<family>_time.py).  Printed here from
the terms: the step-time model's parameter counts (the ``params.*`` and ``static.device.*`` terms, exact) and the
Sec. 6 peak (derivations/assembly/overheads.py ``peak``); the GPUs' published rates are data (gpus.toml).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict

import sympy as sp
from sympy.printing.jscode import jscode

from derivations.steptime.evaluate import DEVICE_TERMS, PARAMETER_TERMS

from .codegen import js
from .pyjs import module_js

#: The step-time model's variants the page runs: Megatron's overlap (search's default --overlap), with DualPipe's own.
TIME_VARIANTS = ("megatron", "megatron_dualpipe")
#: The terms the step-time model's inputs read (derivations/steptime/evaluate.py ``_model_constants`` and
#: ``_device_coefficients``), exact.
PARAMS, DEVICE = PARAMETER_TERMS, DEVICE_TERMS


def _generated(fam: str) -> Dict[str, str]:
    """{name: JavaScript} of the generated modules the search runs (``SEARCH_PY``, ``TIME_PY``, ``DERIVED_PY``)."""
    from derivations import generated
    folder = Path(generated.__file__).parent
    return {"SEARCH_PY": module_js(folder / f"{fam}_search.py", lambda name: "_coefficients_" in name),
            "TIME_PY": module_js(folder / f"{fam}_time.py", lambda name: False,
                                 ["PARTS", "INPUTS", *(f"_step_{v}" for v in TIME_VARIANTS)]),
            "DERIVED_PY": module_js(folder / f"{fam}.py", lambda name: True, ["derived"])}


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
    """{'data': JSON data of the search, 'js': the JavaScript source of its functions}."""
    from derivations import config as cfg
    from derivations.analyses import kernels
    from derivations.assembly import overheads as oh
    from derivations.config.limits import OPTIONS
    from derivations.generate import FAMILY, STRUCTURES
    from derivations.steptime.evaluate import DEFAULT_GPU
    from derivations.steptime.placement import DISPATCHERS
    total, f, buf = sp.symbols("total f buf")
    fns = [f"const {name} = {src};" for name, src in _generated(FAMILY).items()]
    fns += ["const SEARCH_FNS = {", "params: {"]
    for key, ps in _params().items():
        fns.append(f"{json.dumps(key)}: {{" + ", ".join(f"{n}: {src}" for n, src in ps.items()) + "},")
    fns += ["},", f"peak: (total, f, buf) => {jscode(oh.peak(total, f, buf))},", "};"]
    model = SimpleNamespace(structure=STRUCTURES[0], q_lora=STRUCTURES[0][0], family=FAMILY)
    data = {
        # {attention: {"zero|policy": {component: term id}}}: derivations/analyses/kernels.py ``choices`` (the same for
        # every structure of the family)
        "choices": {a: {f"{z}|{r}": pick for (z, r), pick in kernels.choices(model, attention=a).items()}
                    for a in cfg.ATTENTION},
        "policies": list(kernels.policies()), "zeros": sorted(cfg.ZERO_NAMES), "mbs": [1, 2, 4], "seq": [4096],
        "gpus_per_node": 8, "overheads": "high", "ends": {k: [str(v) for v in oh.named_values(k).values()]
                                                          for k in ("high", "low", "none")},
        "default_gpu": DEFAULT_GPU, "dispatchers": list(DISPATCHERS),
        "gpus": _gpus(), "max_gpus": 2 ** 20, "seq_limit": [OPTIONS["seq"].low, OPTIONS["seq"].high],
        "composition": list(cfg.composition_names("deepseek")),
    }
    return {"data": data, "js": "\n".join(fns)}
