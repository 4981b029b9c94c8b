"""Where each parallel group's ranks sit, so which link it sends over; and each schedule's bubble.

Rank order: Megatron-Core's ``RankGenerator`` (megatron/core/parallel_state.py, "tp-cp-ep-dp-pp"; ETP, EP,
expert-DP, PP for the experts), nodes holding consecutive ranks: a group of ``size`` ranks ``stride`` apart is
inside a node of N GPUs when ``stride * size <= N`` (NVLink), else its ring crosses the network (NCCL's rings run
at their slowest link).  Bubble: DeepSeek-V3 report (arXiv:2412.19437) Table 2 (1F1B, ZB1P, DualPipe) and
Megatron's interleaved 1F1B over V virtual stages (Narayanan et al., arXiv:2104.04473, Sec. 2.2), a micro-batch's
period standing for F + B and F&B.
"""
from __future__ import annotations

from typing import Dict, Optional

from numpy import maximum, minimum, select


def bandwidths(tp, cp, dp, pp, per_node: int, nvlink: float, network: float) -> Dict:
    """{'beta_TP', 'beta_CP', 'beta_PP', 'beta_DP', 'beta_EDP'}: bytes/s one device sends at in each group, for
    the layouts' degrees (float arrays, or floats: the page prints this function) on nodes of ``per_node`` GPUs."""
    return {"beta_TP": _bandwidths_ring(tp, per_node, nvlink, network),
            "beta_CP": _bandwidths_ring(tp * cp, per_node, nvlink, network),
            "beta_DP": _bandwidths_ring(tp * cp * dp, per_node, nvlink, network),
            "beta_EDP": _bandwidths_ring(tp * cp * dp, per_node, nvlink, network),
            "beta_PP": _bandwidths_ring(tp * cp * dp * pp, per_node, nvlink, network)}


def _bandwidths_ring(extent, per_node: int, nvlink: float, network: float):
    """A group spanning ``extent`` consecutive ranks: NVLink's bandwidth inside a node, else the network's."""
    return select([extent <= per_node], [nvlink], default=network)


#: the experts' dispatchers: 'alltoall' sends every copy of a token to its expert's rank (Megatron-Core's
#: MoEAlltoAllTokenDispatcher); 'deepep' sends a token once to each node holding one of its experts and
#: forwards it there over NVLink (DeepSeek-V3 report Sec. 3.2.2; DeepEP's normal kernels)
DISPATCHERS = ("alltoall", "deepep")


def dispatch_seconds(ep, etp, per_node: int, nvlink: float, network: float, top_k: int, groups_kept: int,
                     dispatcher: str):
    """tau_EP: seconds the experts' dispatch takes per byte of one token's hidden state on each layout (``ep``,
    ``etp``: float arrays, or floats: the page prints this function).
    The n = EP ETP ranks holding the experts' shards are consecutive (ETP fastest), q = min(n, N) of them per
    node.  Each token has N_r ETP copies (one per expert shard).  'alltoall': a copy goes to each shard's rank,
    (q - 1)/n of them over NVLink and (n - q)/n over the network.  'deepep': a token crosses the network once
    per remote node it needs, at most k = min(N_r ETP, k_g, nodes) nodes (k_g: the groups group-limited routing
    keeps, DeepSeek-V3's node-limited routing when a group is a node's experts), (nodes - 1)/nodes of them
    remote, and reaches each copy's GPU inside the node over NVLink, (q - 1)/q of the copies.  The two links
    work at once: the longer time."""
    n = ep * etp
    return dispatch_time(n, minimum(n, per_node), top_k * etp, groups_kept, nvlink, network, dispatcher)


def dispatch_time(n, q, copies, groups_kept, nvlink, network, dispatcher: str, minimum=minimum, maximum=maximum):
    """:func:`dispatch_seconds`' formula, of the n = EP ETP ranks, q of them per node and each token's ``copies``
    (numpy arrays or floats, or sympy expressions with ``minimum``/``maximum`` sympy's Min/Max: the step time's
    slopes)."""
    if dispatcher == "alltoall":
        return maximum(copies * (n - q) / n / network, copies * (q - 1) / n / nvlink)
    if dispatcher == "deepep":
        nodes = n / q
        k = minimum(minimum(copies, groups_kept), nodes)
        return maximum(k * (nodes - 1) / nodes / network, copies * (q - 1) / q / nvlink)
    raise ValueError(f"unknown dispatcher {dispatcher!r}")


def schedule_coefficients(schedule: Optional[str], pp, vpp: int = 2) -> Dict:
    """{'chi_mb', 'chi_B', 'chi_W'}: the bubble's micro-batch periods, backwards and weight-backwards taken
    out, per ``pp`` (float array, or float: the page prints this function), for ``schedule`` (None: no bubble, the
    steady state of one micro-batch)."""
    zero = pp * 0
    if schedule is None:
        return {"chi_mb": zero, "chi_B": zero, "chi_W": zero}
    if schedule == "1f1b":
        return {"chi_mb": pp - 1, "chi_B": zero, "chi_W": zero}
    if schedule == "interleaved":
        return {"chi_mb": (pp - 1) / vpp, "chi_B": zero, "chi_W": zero}
    if schedule == "zb":
        return {"chi_mb": pp - 1, "chi_B": zero, "chi_W": 2 * (pp - 1)}
    if schedule == "dualpipe":
        half = maximum(pp / 2 - 1, 0)
        return {"chi_mb": half, "chi_B": half, "chi_W": 3 * half}
    raise ValueError(f"unknown schedule {schedule!r}")
