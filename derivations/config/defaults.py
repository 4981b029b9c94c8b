"""One set of defaults (issue 43): the view an option nobody set takes, the same for every command.

With no run named the question is the paper's (arXiv 2502.07846: the unfused attention's 5 b n_h s^2 score tensors,
the dropout masks, one micro-batch per stage): the Training defaults.  A job typed (:data:`RUN_OPTIONS`; not a
memory budget such as ``--hbm`` or ``--gpu``) names a run, and the options nobody set then take what practitioners
run, :data:`RUN_DEFAULTS`.  This layer sits under the recipe's and the conventions preset's (resolve.py
``resolved``), so ``--conventions paper`` gives the paper's view anywhere.
"""
from __future__ import annotations

from typing import Collection, Dict, Mapping, Optional

from derivations.config.training import Training

#: The options (by dest) that name a run: the job's GPUs, its global batch, a launch file.
RUN_OPTIONS = ("gpus", "global_batch", "from_megatron", "from_torchtitan")
#: What a named run runs where nobody set it (by dest); the paper's view is the Training defaults of these dests.
RUN_DEFAULTS: Dict[str, object] = {"attention": "flash"}
PAPER_DEFAULTS: Dict[str, object] = {k: getattr(Training(), k) for k in RUN_DEFAULTS}
#: The GPU (gpus.toml) whose rates a step is timed at and whose usable capacity a search judges when no --gpu or
#: --hbm is given: the paper's (DeepSeek trained on H800s).
DEFAULT_GPU = "h800"


def named_by(values: Mapping[str, object]) -> tuple:
    """The options of ``values`` that name a run, as typed (``('--gpus', '--global-batch')``)."""
    return tuple("--" + k.replace("_", "-") for k in RUN_OPTIONS if values.get(k) is not None)


def applied(values: Mapping[str, object], layered: Collection[str]) -> Dict[str, object]:
    """What this rule decided for ``values`` (a command's options, by dest) where ``layered`` (typed, a recipe's,
    a preset's) left a dest of RUN_DEFAULTS unset: {"view": "run" or "paper", "named_by": [...], "set": {dest:
    value}} ("set" empty when everything was given)."""
    run = named_by(values)
    chosen = RUN_DEFAULTS if run else PAPER_DEFAULTS
    return {"view": "run" if run else "paper", "named_by": list(run),
            "set": {k: v for k, v in chosen.items() if k in values and k not in layered}}


def line(info: Optional[Mapping]) -> Optional[str]:
    """The one line a command prints of :func:`applied`'s result (None when no default was used)."""
    if not info or not info["set"]:
        return None
    chosen = ", ".join(f"{k} {v}" for k, v in info["set"].items())
    if info["view"] == "run":
        return (f"defaults: {chosen} (a run is named: {', '.join(info['named_by'])}; --conventions paper for the "
                f"paper's view)")
    return f"defaults: {chosen}, the paper's view (no run named: --gpus, --global-batch or a launch file)"
