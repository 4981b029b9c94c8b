"""The assembly's formulas printed as exact Python for the generated ``<family>.py`` modules (imports sympy)."""
from __future__ import annotations

from typing import List

import sympy as sp

from derivations import notation as nt
from derivations.assembly import device_terms, schedules, step_terms
from derivations.config import SCHEDULES
from symbolic.codegen import python


def inflight_source() -> List[str]:
    """``inflight(schedule, finite)``: the schedules' in-flight formulas as exact Python."""
    lines = ["def inflight(schedule, v):",
             '    """[(which stage, micro-batches in flight, part), ...] of the device ``v["i_s"]`` under',
             '    ``schedule`` (derivations/assembly/schedules.py formulas; ``v["n_mb"]`` None: as many as fill',
             '    the pipeline)."""',
             "    finite = v.get(\"n_mb\") is not None"]
    for name in SCHEDULES:
        lines.append(f"    if schedule == {name!r}:")
        rows_fin, rows_inf = [], []
        for which, expr, part in schedules.formulas(name):
            rows_fin.append(f"({which!r}, {python(expr)}, {part!r})")
            rows_inf.append(f"({which!r}, {python(expr.xreplace({nt.n_mb: sp.oo}).doit())}, {part!r})")
        lines.append(f"        return [{', '.join(rows_fin)}] if finite else [{', '.join(rows_inf)}]")
    lines.append("    raise ValueError(schedule)")
    return lines


def device_source(shape) -> List[str]:
    """``device(mtp, full, holds, v, options)``: every variant of device_terms.py as exact Python, each setting its
    names in ``v`` in order; equal variants share one function (``DEVICE``: each one's own names, the per-device
    activations and total the search reads) and ``device`` adds the common tail (the per-layer views, Sec. 6's
    peaks)."""
    every = [(key, (mtp, full, holds) + ((True,) if options else ()), mtp, full, holds, options)
             for options in (False, True) for key, mtp, full, holds in device_terms.variants(options)]
    bodies = {at: [f'    v["{name}"] = {python(expr)}'
                   for name, expr in device_terms.assembly(mtp, full, holds, shape, options)]
              for _, at, mtp, full, holds, options in every}
    common = 0
    while all(len(b) > common for b in bodies.values()) and len({b[-1 - common] for b in bodies.values()}) == 1:
        common += 1
    lines = ["#: The activation kinds' symbols and the chunks of the per-device assembly "
             "(derivations/assembly/device_terms.py).",
             f"DEVICE_KINDS = {dict(device_terms.kinds_of(shape))!r}", f"DEVICE_CHUNKS = {device_terms.CHUNKS!r}",
             "", "",
             "def _device_common(v):", *next(iter(bodies.values()))[len(next(iter(bodies.values()))) - common:],
             "    return v"]
    names, seen = {}, {}
    for key, at, *_ in every:
        own = tuple(bodies[at][:len(bodies[at]) - common])
        if own not in seen:
            seen[own] = "_device_" + key.replace(".", "_").replace("+", "_")
            lines += ["", "", f"def {seen[own]}(v):", *own, "    return v"]
        names[at] = seen[own]
    lines += ["", "", "DEVICE = {" + ", ".join(f"{k!r}: {n}" for k, n in names.items()) + "}", "", "",
              "def device(mtp, full, holds, v, options=False):",
              '    """``v`` with the per-device assembly set in order (derivations/assembly/device_terms.py): the view',
              "    with the MTP modules' activations (``mtp``) or full recomputation (``full``), its activations held",
              "    as one micro-batch, a schedule's chunks or given (``holds``: paper, schedule, given), with the",
              "    terms of --offload-activations and --linear-recipe when ``options`` (their inputs O_*, Q_*).\"\"\"",
              "    return _device_common(DEVICE[(mtp, full, holds, True) if options else (mtp, full, holds)](v))"]
    return lines


def step_source() -> List[str]:
    """``step(framework, policy, v)``: the step's moments (step_terms.py) as exact Python."""
    lines = []
    for fw, pol in step_terms.variants():
        ms = step_terms.moments(fw, pol)
        body = ", ".join(f'"{name}": {python(m.expr)}' for name, m in ms.items())
        lines += [f"def _step_{fw}_{pol}(v):", f"    return {{{body}}}", "", ""]
    lines += ["#: Every name the moments read (a family without a dimension reads it as 0: its moments are "
              "DeepSeek's).",
              f"STEP_INPUTS = {step_terms.inputs()!r}", "", "",
              "STEP = {" + ", ".join(f"({fw!r}, {pol!r}): _step_{fw}_{pol}" for fw, pol in step_terms.variants())
              + "}", "", "",
              "def step(framework, policy, v):",
              '    """{moment: bytes above one micro-batch\'s end-of-forward activations} (derivations/assembly/',
              '    step_terms.py): ``framework`` paper, transformers or mcore; ``policy`` none, part or full."""',
              "    return STEP[(framework, policy)](v)"]
    return lines
