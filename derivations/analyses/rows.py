"""The search's rows as ``memsym search --json`` / ``--csv`` print them: the layout (and EDP =
DP*TP*CP/(EP*ETP)), b, s, the ZeRO stage, the policy by name, the most-loaded stage, the paper's four components,
their total, the Sec. 6 peak and the headroom, in bytes rounded to the nearest byte (float64 evaluations of exact
expressions, exact below 2^53); under a schedule also m.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from derivations.analyses.columns import take
from derivations.analyses.evaluation import SearchResult

ROW_KEYS = ("dp", "tp", "pp", "ep", "etp", "cp", "sp", "edp", "mbs", "seq", "zero", "recompute", "stage",
            "weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")
#: the step-time model's columns (derivations/analyses/timing.py), seconds and tokens per second per GPU
TIME_KEYS = ("step_time", "tokens_per_gpu_s", "time_compute", "time_recompute", "time_TP", "time_EP", "time_CP",
             "time_PP", "time_DP", "time_bubble", "time_optimizer", "time_microbatch")
BYTE_KEYS = ("weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")


def row_keys(result: SearchResult) -> Tuple[str, ...]:
    """ROW_KEYS, under a schedule the micro-batch count m of each configuration, and the step time's
    columns when the search was timed (TIME_KEYS)."""
    return ROW_KEYS + (("microbatches",) if "microbatches" in result.columns else ()) + \
        (TIME_KEYS if "step_time" in result.columns else ())


def columns(result: SearchResult, idx) -> Dict[str, list]:
    """The row keys as Python lists for the rows ``idx``: bytes rounded to the nearest byte, policies by name."""
    c = result.columns
    out = {}
    for k in row_keys(result):
        a = take(c, k, idx)
        out[k] = np.rint(a).astype(np.int64).tolist() if k in BYTE_KEYS else \
            [float(x) for x in np.round(a, 6 if k != "tokens_per_gpu_s" else 1)] if k in TIME_KEYS else a.tolist()
    out["recompute"] = [result.policies[i] for i in out["recompute"]]
    return out


def rows(result: SearchResult, idx) -> List[Dict]:
    """Rows as dicts (bytes rounded to the nearest byte), lowercase layout keys."""
    cols, keys = columns(result, idx), row_keys(result)
    return [dict(zip(keys, vals)) for vals in zip(*(cols[k] for k in keys))]
