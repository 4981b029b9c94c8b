"""The names the step's moments are keyed by (pure: no sympy), shared by step_terms.py, device.py and
memsym/page/data.py: :data:`FRAMEWORKS` (``--head-state``), :data:`POLICIES`, :data:`INDICATORS` (0/1 symbols of
options), :data:`NONE_OF` (the kinds' symbols without recomputation) and :func:`trainings`."""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from derivations.config.switches import with_switch

FRAMEWORKS = ("paper", "transformers", "mcore")
POLICIES = ("none", "partial", "full")
#: indicator: (option, value). u_eager: eager attention (score buffers, wrapped scaling numbers); u_grouped:
#: transformers' grouped_mm experts; u_local: Megatron-Core's local layer spec (its DotProductAttention keeps a
#: causal mask per layer, ``--causal-mask per-layer``, what ``--kernels local`` sets).
INDICATORS = {"u_eager": ("attention", "eager"), "u_grouped": ("experts", "grouped"),
              "u_local": ("causal_mask", "per-layer")}
#: the routing symbols a moment may read (step_terms: n_a, n_b the token copies of the last and the second-last expert
#: a MoE layer used, j_l, j_m the layers and MoE layers after it on the stage), each 0 when not given (the bound
#: that holds for any routing, at the stage's last layer); :func:`routing` gives them per layer from a traced routing
ROUTING = ("n_a", "n_b", "j_l", "j_m")
#: the moments that read them: they occur only in a layer whose backward visits at least two experts
ROUTED = ("expert_loop",)
#: {kind's symbol: the same kind's bytes without recomputation} (M_A: the family's attention, M_E MoE, M_D dense)
NONE_OF = {"M_A": "M_A0", "M_E": "M_E0", "M_D": "M_D0"}


def framework_of(conventions) -> str:
    """The framework whose moments ``conventions`` pass through (``--head-state``; the paper's otherwise)."""
    return conventions.head_state if conventions.head_state in FRAMEWORKS else "paper"


def policy_of(recompute: str) -> str:
    """A recomputation policy as the moments see it: none, partial (selective, custom) or full."""
    return {"none": "none", "full": "full"}.get(recompute, "partial")


def term_id(framework: str, policy: str, moment: str) -> str:
    """``step.<framework>.<policy>.<moment>``: one moment's term id (its expression depends on all three)."""
    return f"step.{framework}.{policy}.{moment}"


def trainings(training) -> Tuple[object, object]:
    """(the training the moments read, without ``--ce-backward``'s transient; the same unrecomputed)."""
    plain = with_switch(training, "ce_backward", "none") if training.conventions.ce_backward != "none" else training
    return plain, replace(plain, recompute="none", recompute_ops=())


def indicators(training) -> Dict[str, int]:
    """{indicator: 0 or 1} of ``training`` (:data:`INDICATORS`)."""
    read = lambda option: training.attention if option == "attention" else getattr(training.conventions, option)  # noqa: E731
    return {name: int(read(option) == value) for name, (option, value) in INDICATORS.items()}


def routing(expert_tokens, kinds) -> Optional[List[Dict[str, int]]]:
    """The :data:`ROUTING` values of each MoE layer of the stage (``kinds``: ((layer, kind), ...)) at the router's
    counts (``expert_tokens``), None when none is known (the bound); a layer that used fewer than two experts has no
    :data:`ROUTED` moment."""
    if not expert_tokens:
        return None
    known = dict(expert_tokens)
    out = []
    for pos, (layer, kind) in enumerate(kinds):
        if kind != "moe":
            continue
        after = kinds[pos + 1:]
        row = {"j_l": len(after), "j_m": sum(k == "moe" for _, k in after), "n_a": 0, "n_b": 0}
        if layer in known:
            used = [c for c in known[layer] if c > 0]
            if len(used) < 2:
                continue
            row["n_a"], row["n_b"] = used[-1], used[-2]
        out.append(row)
    return out
