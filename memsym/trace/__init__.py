"""Ground truth per tensor (``paper/traces/``): real implementations traced on CPU (:mod:`.hf`, :mod:`.mcore`),
their saves recorded (:mod:`.recorder`), inputs checked before torch is imported (:mod:`.inputs`), written as TOML
(:mod:`.records`).  torch, transformers and megatron-core are the extra ``memsym[trace]``, never imported here."""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

from symbolic import tomlfile

from .fake import describe

INSTALL_HINT = "pip install 'memsym[trace]'"
#: The tracer's tables and notes (trace.toml).
with tomlfile.package_data(Path(__file__).with_name("trace.toml")) as _data:
    DATA = {k: _data[k] for k in ("transformers", "mcore_modules", "switches", "notes", "mcore")}

#: Largest config traced on CPU: parameters and the biggest saved score tensor (b n_h s^2 elements).
MAX_PARAMS = 50_000_000
MAX_SCORE_ELEMENTS = 64 * 1024 * 1024
MAX_TOKENS = 16384

#: ``--fake`` allocates nothing: bounded by time and the real routing tensors (b s N_r x N) instead.
MAX_FAKE_LAYERS = 4
MAX_FAKE_TOKENS = 32768


def traced(framework: str, versions: dict, n_layers: int, build, prepare, make_inputs, forward, grads, fake: bool,
           step: bool, modes, step_context=contextlib.nullcontext):
    """An implementation's trace: ``build()``'s forward under ``modes`` (fake, routing), a backward unless fake, and
    with ``step`` a profiled step of a model built again (:mod:`.step`); (recorder, info).  ``prepare(model)`` ->
    (layer kinds, hooks removed after the forward); ``forward(model, *inputs, hold)`` -> (loss, recorder)."""
    fake_mode, routing = modes
    model = build()
    kinds, hooks = prepare(model)
    with fake_mode or contextlib.nullcontext(), routing:
        loss, rec = forward(model, *make_inputs())
    for hook in hooks:
        hook.remove()
    value, n_grads = None, 0
    if not fake:  # a fake trace runs no backward (nothing to compute it with)
        loss.backward()
        value, n_grads = float(loss.detach()), len(grads(model))
    info = {"framework": framework, "versions": versions, "loss": value, "params_with_grad": n_grads,
            "alive_check": rec.alive_check(), "n_layers": n_layers, "kinds": kinds, "routing": describe(routing)}
    if step:
        from . import step as profiled
        del model, loss
        with step_context():
            info["step"] = profiled.run(build(), make_inputs, lambda m, *x: forward(m, *x, hold=False), grads)
    return rec, info


def missing(framework: str = "transformers"):
    """The name of the first package the trace extra needs that is not installed, or None."""
    need = ["torch", "transformers"] if framework == "transformers" else ["torch", "megatron.core"]
    for mod in need:
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except ModuleNotFoundError:
            return mod
    return None
