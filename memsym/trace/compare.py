"""Measured (a trace) beside predicted (a preset's estimate at the traced settings): no torch here."""
from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Dict, Optional

from derivations import config as cfg
from derivations.assembly.device import estimate
from derivations.config import CONVENTION_PRESETS
from derivations.config.switches import CONVENTION_SWITCHES, with_preset, with_switch
from symbolic.errors import ConfigError

from . import DATA
from .inputs import MCORE_RECIPE, MCORE_SETTINGS, SETTINGS, mcore_settings


#: Megatron-Core's recompute_modules as memsym's recompute operators; what a trace ran as switches of its preset.
MCORE_MODULES, TRACE_SWITCHES = DATA["mcore_modules"], DATA["switches"]


def run_switches(args, preset: str):
    """``[(switch, value)]``: what the trace ran (:data:`TRACE_SWITCHES`) where it differs from ``preset``, when
    ``preset`` is the traced framework's own; else none (another preset predicts with its own values)."""
    framework = getattr(args, "framework", "")
    if preset != framework:
        return []
    defaults = {"transformers": {"experts": "loop"}, "mcore": MCORE_RECIPE}[framework]  # what a trace runs untold
    out = []
    for setting, values in TRACE_SWITCHES[framework].items():
        given = getattr(args, setting, None)
        value = values.get(defaults[setting] if given is None else given)
        if value is not None and value != CONVENTION_PRESETS[preset][setting]:
            out.append((setting, value))
    return out


def memsym_recompute(framework: str, recompute: str) -> str:
    """``--recompute`` of the trace as memsym's (Megatron-Core module names become operators)."""
    if framework != "mcore" or not recompute.startswith("custom:"):
        return recompute
    mods = [m for m in recompute.split(":", 1)[1].split(",") if m]
    missing = [m for m in mods if m not in MCORE_MODULES]
    if missing:
        raise ConfigError("recompute", f"Megatron-Core's {', '.join(missing)} recomputation has no memsym "
                                       f"operator yet (modelled: {', '.join(MCORE_MODULES)})")
    ops = sorted({op for m in mods for op in MCORE_MODULES[m]})
    return "custom:" + ",".join(ops)


def _estimate(args, preset: str, model=None):
    """The estimate at the traced settings on one device under ``preset`` (``model``: else read from args.model)."""
    model = model if model is not None else cfg.load_model(args.model)
    layout = cfg.Layout(dp=1, tp=1, pp=1, ep=1, etp=1)
    rec = cfg.parse_recompute(memsym_recompute(getattr(args, "framework", ""), args.recompute))
    training = cfg.Training(mbs=args.mbs, seq=args.seq, recompute=rec[0], recompute_ops=rec[1])
    training = with_preset(training, preset)
    for switch, value in run_switches(args, preset):
        training = with_switch(training, switch, value)
    # a trace records what autograd saves: the cross-entropy backward's transient is not a saved tensor
    training = with_switch(training, "ce_backward", "none")
    # MTP modules: Megatron-Core builds the config's D (num_nextn_predict_layers) on its last stage, transformers none
    if getattr(args, "framework", "") == "mcore" and model.mtp_layers > 0:
        training = with_switch(training, "mtp_activations", "last-stage")
    if args.act_dtype == "fp32":
        training = training.with_bytes(B_a=4, B_w=4)  # the model is built in FP32: its weights' gradients too
    tokens = getattr(args, "expert_tokens", None)  # a step record's routing ([measured.step] expert_tokens)
    if tokens:
        training = replace(training, expert_tokens=tuple((r["layer"], tuple(r["counts"])) for r in tokens))
    return estimate(model, layout, training)


def predicted(args, preset: str, model=None) -> dict:
    """``estimate --json``'s per-layer bytes at the traced settings, one device (``model``: as :func:`_estimate`)."""
    argv = ["estimate", "--model", args.model, "--dp", "1", "--tp", "1", "--pp", "1", "--ep", "1", "--etp", "1",
            "--mbs", str(args.mbs), "--seq", str(args.seq), "--conventions", preset]
    if args.act_dtype == "fp32":
        argv += ["--act-dtype", "fp32", "--weight-dtype", "fp32"]
    for switch, value in run_switches(args, preset):
        argv += [CONVENTION_SWITCHES[switch].option, value]
    if args.recompute != "none":
        argv += ["--recompute", memsym_recompute(getattr(args, "framework", ""), args.recompute)]
    est = _estimate(args, preset, model)
    if CONVENTION_PRESETS.get(preset, {}).get("ce_backward", "none") != "none":
        argv += ["--ce-backward", "none"]
    if est.training.conventions.mtp_activations != "none":
        argv += ["--mtp-activations", est.training.conventions.mtp_activations]
    b = est.to_json()["bytes"]
    return {"conventions": preset, "estimate": "memsym " + " ".join(argv),
            "activations_by_layer": b["activations_by_layer"],
            "activations_outside_layers": b["activations_outside_layers"]}


def families(rec, saved=None) -> Dict[str, Dict]:
    """Bytes and storage count per tensor family of the storages held at the end of the forward (or of ``saved``):
    each named by its module (layer index dropped) and dtype, so that a family sums over layers and experts."""
    out: Dict[str, Dict] = {}
    for r in rec.held() if saved is None else saved:
        mod = re.sub(r"layers\.\d+\.", "layers.*.", r.module or "(no module)")
        if r.layer is None and r.sublayer == "shared":
            mod = "shared by several layers"
        f = out.setdefault(f"{mod} {r.dtype}", {"bytes": 0, "count": 0})
        f["bytes"] += r.nbytes
        f["count"] += 1
    return out


def result(args, rec, info, model=None) -> dict:
    """The trace's output: settings, versions, measured (``rec``, ``info``) and predicted bytes."""
    n = info["n_layers"]
    per, outside = rec.by_layer(n)
    kinds = info["kinds"]  # which layers the framework built with experts
    gone = rec.discarded()
    measured = {"activations_by_layer": [{"layer": i, "kind": kinds[i], "bytes": per[i]} for i in range(n)],
                "activations_outside_layers": outside,
                "families": families(rec),
                # saved during the forward by nodes freed before its end (memsym/trace/recorder.py): not held
                "discarded": {"bytes": sum(r.nbytes for r in gone), "storages": len(gone),
                              "families": families(rec, gone)}}
    preset = args.conventions or (args.framework if args.framework in CONVENTION_PRESETS else "paper")
    try:
        pred = predicted(args, preset, model)
    except ConfigError as exc:
        pred = {"conventions": preset, "error": str(exc),
                "activations_by_layer": [], "activations_outside_layers": None}
    settings = {k: getattr(args, k) for k in SETTINGS}
    if args.framework == "mcore":  # its settings as run (the recipe's where not given)
        settings.update(mcore_settings({k: getattr(args, k, None) for k in MCORE_SETTINGS}))
    if getattr(args, "fake", False):
        settings["fake"] = True
    out = {"settings": settings, "versions": info["versions"], "measured": measured, "predicted": pred,
           "trains": {"loss": info["loss"], "params_with_grad": info["params_with_grad"]},
           "routing": info.get("routing", "the router's (real scores)"),
           "cross_check": info["alive_check"],
           "tensors": [r.to_json() for r in rec.saved.values()] if args.tensors else None}
    if "step" in info:  # memsym trace --step (memsym/trace/step.py)
        settings["step"] = True
        out["step"] = step_result(info["step"], rec, info, n)
        if info.get("expert_tokens"):
            out["step"]["expert_tokens"] = info["expert_tokens"]
        out["step"]["predicted"] = predicted_step(args, preset, model, info.get("expert_tokens"))
    return out


def predicted_step(args, preset: str, model, expert_tokens) -> Optional[dict]:
    """The preset's step peak at the traced settings with the router's counts (step_terms.py), or None."""
    try:
        est = _estimate(SimpleNamespace(**{**vars(args), "expert_tokens": expert_tokens}), preset, model)
    except ConfigError:
        return None
    b = est.to_json()["bytes"]
    end = sum(x["bytes"] for x in b["activations_by_layer"]) + b["activations_outside_layers"]
    return {"conventions": preset, "peak": int(end + est.bytes["step"]), "routing": bool(expert_tokens),
            "moment": est.term_ids["step"] or "the end of the forward"}


def step_result(measured: dict, rec, info: dict, n_layers: int) -> dict:
    """The profiled step's result, checked to have run as the trace (the same loss and saves per layer)."""
    mine = measured["recorder"].by_layer(n_layers)
    if measured["loss"] != info["loss"] or mine != rec.by_layer(n_layers):
        raise AssertionError(f"the profiled step did not run as the trace: loss {measured['loss']} vs {info['loss']}, "
                             f"saved per layer and outside {mine} vs {rec.by_layer(n_layers)}")
    return {k: v for k, v in measured.items() if k not in ("recorder", "allocations", "loss")}
