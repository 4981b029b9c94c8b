"""Where each parallel group's ranks sit, so which link it sends over; and each schedule's bubble.

Rank order: Megatron-Core's ``RankGenerator`` (megatron/core/parallel_state.py, "tp-cp-ep-dp-pp"; ETP, EP,
expert-DP, PP for the experts), nodes holding consecutive ranks: a group of ``size`` ranks ``stride`` apart is
inside a node of N GPUs when ``stride * size <= N`` (NVLink), else its ring crosses the network (NCCL's rings run
at their slowest link).  Bubble: DeepSeek-V3 report (arXiv:2412.19437) Table 2 (1F1B, ZB1P, DualPipe) and
Megatron's interleaved 1F1B over V virtual stages (Narayanan et al., arXiv:2104.04473, Sec. 2.2), a micro-batch's
period standing for F + B and F&B.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np


def _inside(extent, per_node: int):
    return extent <= per_node


def bandwidths(rows: Mapping[str, np.ndarray], per_node: int, nvlink: float, network: float) -> Dict[str, np.ndarray]:
    """{'beta_TP', 'beta_CP', 'beta_PP', 'beta_DP', 'beta_EDP'}: bytes/s one device sends at in
    each group, for the layouts of ``rows`` (arrays tp, cp, dp, pp) on nodes of ``per_node`` GPUs."""
    f = lambda k: np.asarray(rows[k], dtype=np.float64)
    tp, cp, dp, pp = f("tp"), f("cp"), f("dp"), f("pp")
    ring = lambda extent: np.where(_inside(extent, per_node), nvlink, network)
    return {"beta_TP": ring(tp), "beta_CP": ring(tp * cp), "beta_DP": ring(tp * cp * dp),
            "beta_EDP": ring(tp * cp * dp), "beta_PP": ring(tp * cp * dp * pp)}


#: the experts' dispatchers: 'alltoall' sends every copy of a token to its expert's rank (Megatron-Core's
#: MoEAlltoAllTokenDispatcher); 'deepep' sends a token once to each node holding one of its experts and
#: forwards it there over NVLink (DeepSeek-V3 report Sec. 3.2.2; DeepEP's normal kernels)
DISPATCHERS = ("alltoall", "deepep")


def dispatch_seconds(rows: Mapping[str, np.ndarray], per_node: int, nvlink: float, network: float, top_k: int,
                     groups_kept: int, dispatcher: str) -> np.ndarray:
    """tau_EP: seconds the experts' dispatch takes per byte of one token's hidden state on each row's layout.
    The n = EP ETP ranks holding the experts' shards are consecutive (ETP fastest), q = min(n, N) of them per
    node.  Each token has N_r ETP copies (one per expert shard).  'alltoall': a copy goes to each shard's rank,
    (q - 1)/n of them over NVLink and (n - q)/n over the network.  'deepep': a token crosses the network once
    per remote node it needs, at most k = min(N_r ETP, k_g, nodes) nodes (k_g: the groups group-limited routing
    keeps, DeepSeek-V3's node-limited routing when a group is a node's experts), (nodes - 1)/nodes of them
    remote, and reaches each copy's GPU inside the node over NVLink, (q - 1)/q of the copies.  The two links
    work at once: the longer time."""
    f = lambda k: np.asarray(rows[k], dtype=np.float64)
    n = f("ep") * f("etp")
    return dispatch_time(n, np.minimum(n, per_node), top_k * f("etp"), groups_kept, nvlink, network, dispatcher)


def dispatch_time(n, q, copies, groups_kept, nvlink, network, dispatcher: str, minimum=np.minimum,
                  maximum=np.maximum):
    """:func:`dispatch_seconds`' formula, of the n = EP ETP ranks, q of them per node and each token's ``copies``
    (numpy arrays, or sympy expressions with ``minimum``/``maximum`` sympy's Min/Max: the step time's slopes)."""
    if dispatcher == "alltoall":
        net, nvl = copies * (n - q) / n, copies * (q - 1) / n
    elif dispatcher == "deepep":
        nodes = n / q
        k = minimum(minimum(copies, groups_kept), nodes)
        net, nvl = k * (nodes - 1) / nodes, copies * (q - 1) / q
    else:
        raise ValueError(f"unknown dispatcher {dispatcher!r}")
    return maximum(net / network, nvl / nvlink)


def schedule_coefficients(schedule: Optional[str], pp, vpp: int = 2) -> Dict[str, np.ndarray]:
    """{'chi_mb', 'chi_B', 'chi_W'}: the bubble's micro-batch periods, backwards and weight-backwards taken
    out, per ``pp`` (array), for ``schedule`` (None: no bubble, the steady state of one micro-batch)."""
    pp = np.asarray(pp, dtype=np.float64)
    zero = np.zeros_like(pp)
    if schedule is None:
        return {"chi_mb": zero, "chi_B": zero, "chi_W": zero}
    if schedule == "1f1b":
        return {"chi_mb": pp - 1, "chi_B": zero, "chi_W": zero}
    if schedule == "interleaved":
        return {"chi_mb": (pp - 1) / vpp, "chi_B": zero, "chi_W": zero}
    if schedule == "zb":
        return {"chi_mb": pp - 1, "chi_B": zero, "chi_W": 2 * (pp - 1)}
    if schedule == "dualpipe":
        half = np.maximum(pp / 2 - 1, 0)
        return {"chi_mb": half, "chi_B": half, "chi_W": 3 * half}
    raise ValueError(f"unknown schedule {schedule!r}")
