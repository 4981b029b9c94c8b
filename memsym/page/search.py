"""The page's layout search (templates/page/search.js): the per-device assembly and the step-time model in JavaScript
over floats (:mod:`memsym.page.pyjs`), the parameter counts and the Sec. 6 peak printed from the terms."""
from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Optional

import sympy as sp
from sympy.printing.jscode import jscode

from derivations import config as cfg
from derivations import generated, variant
from derivations.analyses import enumeration, kernels
from derivations.assembly import overheads as oh
from derivations.config.frameworks import FRAMEWORKS, OF_CONVENTIONS
from derivations.config.gpus import presets
from derivations.config.switches import CONVENTION_PRESETS, RANK_ZERO
from derivations.generate import FAMILY, STRUCTURES, structure_key
from derivations.steptime import evaluate, placement
from derivations.steptime.evaluate import DEFAULT_GPU, DEVICE_TERMS, EXTRA_TERMS, PARAMETER_TERMS

from .codegen import js
from .pyjs import Printed, module_js

#: The step-time model's variants the page runs: Megatron's overlap (search's default --overlap), with DualPipe's own.
TIME_VARIANTS = ("megatron", "megatron_dualpipe")


def _float_js(fam: str) -> str:
    """``TIME_PY`` (the generated step-time module's variants the search runs), ``PLACEMENT`` (the links and the
    bubble: derivations/steptime/placement.py), ``STEPTIME`` (evaluate.py's inputs), ``layout_rules``
    (enumeration.py, over Python's values) and ``SEARCH_ASSEMBLY(Q)`` (the family's printed per-device
    assembly, ``Q`` the number system of its fractions), JavaScript over floats."""
    read = lambda name: (Path(generated.__file__).parent / name).read_text(encoding="utf-8")  # noqa: E731
    time = module_js(read(f"{fam}_time.py"), lambda name: False, ["PARTS", "INPUTS", "_step_common",
                                                                   *(f"_step_{v}" for v in TIME_VARIANTS)])
    links = module_js(inspect.getsource(placement), lambda name: False, ["bandwidths", "dispatch_seconds",
                                                                         "dispatch_time", "schedule_coefficients"])
    steptime = module_js(inspect.getsource(evaluate), lambda name: False, [
        "PARAMETER_TERMS", "DIMENSIONS", "WIDTHS", "EXTRA_TERMS", "constants", "groups_kept", "dsa_attention",
        "stage_inputs"])
    rules = Printed({})
    rules.add(enumeration.layout_rules)
    return (f"const TIME_PY = {time};\nconst PLACEMENT = {links};\nconst STEPTIME = {steptime};\n{rules.js()}\n"
            f"const SEARCH_ASSEMBLY = (Q) => "
            f"{module_js(read(f'{fam}.py'), lambda name: False, ['device', 'DEVICE'])};")


def _params() -> Dict:
    """{structure key: {P_A, ..., P_n, P_m: JS function (exact)}}: the terms of the step-time model's inputs per
    structure (the default training's: derivations/steptime/evaluate.py reads them with the paper's bytes)."""
    out = {}
    for s in STRUCTURES:
        var = variant(SimpleNamespace(structure=s, family=FAMILY, name="{name}"), cfg.Training())
        out[structure_key(s)] = {name: f"(e) => {js(var.terms[tid].expr)}" if tid in var.terms else "(e) => Q.n(0)"
                                 for name, tid in PARAMETER_TERMS + DEVICE_TERMS + tuple((t, t) for t in EXTRA_TERMS)}
    return out


def _gpus() -> Dict:
    return {g.key: {"capacity": g.capacity, "rates": dict(g.rates)} for g in presets().values()}


def _refusal(fn) -> Optional[str]:
    """The message of the ConfigError ``fn()`` raises, or None."""
    try:
        fn()
    except cfg.ConfigError as e:
        return str(e)
    return None


def _conventions() -> Dict:
    """What ``search --conventions`` reads (commands/search.py): each preset's switches and attention, the framework
    it describes (its ZeRO stages; the refusal of each schedule it does not run) and the ranks' own ZeRO stage; the
    step time's rate and cast bytes per linear recipe, and each GPU's refusal of a recipe it has no rate for."""
    recipes = [None, *evaluate.RECIPE_BYTES]
    return {
        "presets": CONVENTION_PRESETS, "of_conventions": OF_CONVENTIONS, "rank_zero": RANK_ZERO,
        "frameworks": {n: {"name": f.name, "zero": f.zero, "zero_pp": f.zero_pp,
                           "refusals": {s: f.refusal(0, 2, s) for s in cfg.SCHEDULES if s not in f.schedules}}
                       for n, f in FRAMEWORKS.items()},
        "recipes": {"null" if r is None else r: [evaluate.RECIPE_RATES[r], float(evaluate.RECIPE_BYTES.get(r, 0))]
                    for r in recipes},
        "recipe_refusals": {g: {r: _refusal(lambda: evaluate.check(SimpleNamespace(family=FAMILY), g,
                                                                    training=cfg.Training(linear_recipe=r)))
                                for r in recipes[1:]} for g in presets()},
    }


def generate() -> Dict:
    """{'data': JSON data of the search, 'js': the JavaScript source of its functions}."""
    total, f, buf = sp.symbols("total f buf")
    fns = [_float_js(FAMILY), "const SEARCH_FNS = {", "params: {"]
    for key, ps in _params().items():
        fns.append(f"{json.dumps(key)}: {{" + ", ".join(f"{json.dumps(n)}: {src}" for n, src in ps.items()) + "},")
    fns += ["},", f"peak: (total, f, buf) => {jscode(oh.peak(total, f, buf))},", "};"]
    data = {
        "attentions": list(cfg.ATTENTION), "policies": list(kernels.policies()), "zeros": sorted(cfg.ZERO_NAMES),
        "mbs": [1, 2, 4], "seq": [4096],
        "gpus_per_node": 8, "overheads": "high", "ends": {k: [str(v) for v in oh.named_values(k).values()]
                                                          for k in ("high", "low", "none")},
        "default_gpu": DEFAULT_GPU, "gpus": _gpus(), "max_gpus": enumeration.MAX_GPUS,
        "switches": evaluate.switches("megatron"),
        "composition": list(cfg.composition_names("deepseek")), **_conventions(),
    }
    return {"data": data, "js": "\n".join(fns)}
