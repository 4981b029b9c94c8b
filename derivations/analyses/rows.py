"""The search's rows as ``memsym search --json`` / ``--csv`` print them: the layout and EDP, b, s, ZeRO stage,
policy, most-loaded stage, the four components, total, Sec. 6 peak and headroom in bytes rounded to the byte (float64
of exact expressions, exact below 2^53); m under a schedule; the judged bytes under ``--memory`` (allocator.memory).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Tuple

import numpy as np

from derivations import config as cfg
from derivations.analyses.evaluation import SearchResult

ROW_KEYS = ("dp", "tp", "pp", "ep", "etp", "cp", "sp", "edp", "mbs", "seq", "zero", "recompute", "stage",
            "weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")
#: the step-time model's columns (derivations/analyses/timing.py), seconds and tokens per second per GPU
TIME_KEYS = ("step_time", "tokens_per_gpu_s", "time_compute", "time_recompute", "time_TP", "time_EP", "time_CP",
             "time_PP", "time_DP", "time_bubble", "time_optimizer", "time_microbatch")
BYTE_KEYS = ("weights", "gradients", "optimizer", "activations", "total", "peak", "headroom")
#: --memory's bytes of each row judged (allocator.KINDS)
JUDGED_KEYS = ("allocated", "reserved", "device")


def row_keys(result: SearchResult) -> Tuple[str, ...]:
    """ROW_KEYS, under a schedule the micro-batch count m of each configuration, the step time's
    columns when the search was timed (TIME_KEYS), the judged bytes under --memory (JUDGED_KEYS)."""
    return ROW_KEYS + (("microbatches",) if "microbatches" in result.columns else ()) + \
        (TIME_KEYS if "step_time" in result.columns else ()) + (JUDGED_KEYS if result.judged else ())


def columns(result: SearchResult, idx) -> Dict[str, list]:
    """The row keys as Python lists for the rows ``idx``: bytes rounded to the nearest byte, policies by name."""
    c = result.columns
    out = {}
    for k in row_keys(result):
        if k in JUDGED_KEYS:
            out[k] = [result.judged["bytes"][int(i)][k] for i in idx]
            continue
        a = c.take(k, idx)
        out[k] = np.rint(a).astype(np.int64).tolist() if k in BYTE_KEYS else \
            [float(x) for x in np.round(a, 6 if k != "tokens_per_gpu_s" else 1)] if k in TIME_KEYS else a.tolist()
    out["recompute"] = [result.policies[i] for i in out["recompute"]]
    return out


def rows(result: SearchResult, idx) -> List[Dict]:
    """Rows as dicts (bytes rounded to the nearest byte), lowercase layout keys."""
    cols, keys = columns(result, idx), row_keys(result)
    return [dict(zip(keys, vals)) for vals in zip(*(cols[k] for k in keys))]


def configuration(result: SearchResult, row: Dict) -> Tuple[cfg.Layout, cfg.Training, int]:
    """(layout, training, stage) of a row: what ``memsym estimate`` evaluates for it (the search's training with the
    row's ZeRO stage, policy, b, s and, under a global batch, its m; SP = TP; the row's most-loaded stage)."""
    layout = cfg.Layout(**{k: row[k] for k in ("dp", "tp", "pp", "ep", "etp", "cp")})
    recompute, ops = cfg.parse_recompute(row["recompute"])
    training = replace(result.training, zero=row["zero"], recompute=recompute, recompute_ops=ops, mbs=row["mbs"],
                       seq=row["seq"], microbatches=row.get("microbatches") or result.training.microbatches)
    return layout, training, row["stage"]
