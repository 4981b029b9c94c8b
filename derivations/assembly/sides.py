"""Where a device's parameters and model states come from under the conventions (pure: no sympy): the rank reported
(``--rank``) and the shared experts' split (``--shared-expert``) choose the term ids of P_n, P_m and the model states
(zero.py, conventions.py); ``--mtp`` moves the MTP modules onto the last stage (:func:`mtp_stage_shift`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from derivations import families
from derivations.activations.naming import activation_ids
from derivations.activations.shape import of_model
from derivations.activations.view import View
from derivations.config import ZERO_NAMES, ConfigError, Conventions, whole_model
from derivations.config.values import named

#: The four components of the per-device total, in the paper's order.
COMPONENTS = ("weights", "gradients", "optimizer", "activations")

#: The model-state components and the ZeRO stage from which each is sharded (Sec. 4, Table 8).
SHARDED_FROM = {"weights": 3, "gradients": 2, "optimizer": 1}


def component_ids(prefix: str, zero_stage: int) -> Dict[str, str]:
    """{component: term id} under ``prefix`` for a ZeRO stage (0-3): ``<prefix>.<component>.<replicated|sharded>``."""
    return {name: f"{prefix}.{name}.{'sharded' if zero_stage >= level else 'replicated'}"
            for name, level in SHARDED_FROM.items()}


@dataclass(frozen=True)
class WeightSide:
    """The term ids of a device's parameters and model states: rank 'stage' ``non_moe``/``moe`` (P_n, P_m at the stage);
    rank 'megatron' ``params``, Megatron's shard at the whole model, split by its parts' tags."""

    rank: str
    params: str
    non_moe: str
    moe: str
    prefix: str
    suffix: str

    def component_ids(self, zero: int) -> Dict[str, str]:
        return {k: t + self.suffix for k, t in component_ids(self.prefix, zero).items()}


def weight_side(conventions: Conventions) -> WeightSide:
    """The :class:`WeightSide` of ``conventions``."""
    shared_tp = conventions.shared_expert == "tp"
    if conventions.rank == "megatron":
        sfx = "" if shared_tp else ".shared-replicated"
        pid = f"conv.megatron.params{sfx}"
        return WeightSide("megatron", pid, pid, pid, "conv.megatron", sfx)
    if conventions.rank == "modelzoo":
        return WeightSide("stage", "conv.modelzoo.params", "conv.modelzoo.params.non_moe", "conv.modelzoo.params.moe",
                          "conv.modelzoo", "")
    fsdp2 = {"fsdp2": ".fsdp2", "mfsdp": ".mfsdp"}.get(conventions.rank, "")  # derivations/assembly/fsdp.py
    if not shared_tp:
        return WeightSide("stage", "static.device.total", "static.device.non_moe", "static.device.moe", "zero", fsdp2)
    return WeightSide("stage", "static.device.total.shared-tp", "static.device.non_moe",
                      "static.device.moe.shared-tp", "zero", ".shared-tp" + fsdp2)


def check_mtp(model, conventions: Conventions) -> None:
    """--mtp and --mtp-activations last-stage refused (one line) for a model whose family has no MTP modules."""
    fam = families.find(getattr(model, "family", None))
    if fam is not None and "mtp" not in fam.kinds and (conventions.mtp or conventions.mtp_activations != "none"):
        opt = "--mtp" if conventions.mtp else f"--mtp-activations {conventions.mtp_activations}"
        raise ConfigError("mtp", f"{opt}: {model.name} ({fam.title}) has no multi-token-prediction modules")


def weight_side_of(model, conventions: Conventions) -> WeightSide:
    """:func:`weight_side`, refused (one line) for a family without the ``conventions`` section."""
    side = weight_side(conventions)
    if side.prefix != "zero" or side.suffix:
        fam = families.find(getattr(model, "family", None))
        if fam is not None and "conventions" not in fam.sections:
            raise families.unsupported(model,
                                       f"--rank {conventions.rank} / --shared-expert {conventions.shared_expert}")
    return side


def megatron_values(model, layout, training) -> Dict[str, object]:
    """The substitution of Megatron's shard: the whole model, D the MTP layers under ``--mtp``."""
    out = named(model, layout, training, whole_model(model))
    out["D"] = model.mtp_layers if training.conventions.mtp else 0
    return out


def mtp_stage_shift(model, pp: int, comp: Dict[str, int]) -> Dict[str, int]:
    """The composition ``comp`` of a device's held stages with ``--mtp``: Megatron-Core builds the D MTP modules on the
    last stage (gpt_model.py ``mtp_process``), each one more MoE layer, and with PP > 1 that stage keeps its own word
    embedding unless tied or already held (DualPipe's rank 0)."""
    head, embedding = comp["e_H"], comp["e_E"]
    if not head:
        return dict(comp)
    # no copy when the device already holds the embedding (PP = 1, or DualPipe's rank 0 holding stages 0 and
    # PP - 1: the embedding and head are shared there, DeepSeek-V3 report Sec. 3.2.1)
    copy = 0 if model.tie_word_embeddings or pp == 1 or embedding or not model.mtp_layers else head
    out = {**comp, "L_m": comp["L_m"] + model.mtp_layers * head, "e_E": embedding + copy}
    features = model.mtp_layer_features()
    for sym, feature, _ in families.get(model.family).counts:
        if feature in features:
            out[sym] = comp[sym] + model.mtp_layers * head
    return out


def device_component_ids(model, training, schedule_ok: bool = False) -> Dict[str, str]:
    """{component: term id} of the per-device total of ``training`` (ZeRO stage, weight side, view)."""
    if getattr(training, "schedule", None) and not schedule_ok:
        raise ConfigError("schedule", f"--schedule {training.schedule}: sensitivity, fit and search use the paper's "
                                      f"one-micro-batch-per-stage view; use `memsym estimate --schedule` for schedules")
    if training.zero not in ZERO_NAMES:
        raise ConfigError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {training.zero!r}")
    check_mtp(model, training.conventions)
    ids = weight_side_of(model, training.conventions).component_ids(training.zero)
    ids["activations"] = activation_ids(View.of(training), of_model(model))["stage"]
    return {k: ids[k] for k in COMPONENTS}
