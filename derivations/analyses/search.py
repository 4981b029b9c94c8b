"""Configuration search: every valid layout for a GPU count, every stage, one vectorised pass.

A configuration is a parallel layout (DP, TP, PP, EP, ETP, CP with DP*TP*PP*CP = GPUs;
SP = TP, sequence parallelism on as in the paper's Table 9), a ZeRO stage, a
recomputation policy, a micro-batch b and a sequence length s.  The search

1. enumerates the layouts over the divisor lattice of the GPU count and keeps those that
   pass :func:`derivations.config.validate_layout`, counting the rejections by constraint,
   and lists per PP the distinct stage compositions (L_d, L_m, e_E, e_H)
   (derivations/analyses/enumeration.py);
2. evaluates every component term for every (layout, s, b, composition) row in one
   vectorised pass, takes the most-loaded stage of each configuration (or, under a pipeline
   schedule, device: the printed per-device assembly, derivations/analyses/exact.py) and applies the Sec. 6 peak
   ``(1 + f_frag) * total + M_buf`` (derivations/analyses/evaluation.py);
3. ranks the fitting configurations, the best of each layout first
   (derivations/analyses/ranking.py);
4. formats them as rows (derivations/analyses/rows.py).

The component expressions and which of them each (ZeRO stage, policy) uses come from
derivations/assembly/totals.py, evaluated by the kernels ``python -m derivations.generate`` prints
(derivations/analyses/kernels.py); the blocked evaluation is :mod:`symbolic.search`.  This module is the
single import point of the search (``from derivations.analyses import search as S``).
"""
from __future__ import annotations

from symbolic.search import FACTOR_ABOVE, divisors, evaluate, factored

from derivations.analyses.enumeration import (LAYOUT_FIELDS, MAX_GPUS, Enumeration, distinct_stages,
                                              enumerate_layouts, lattice, rejections)
from derivations.analyses.evaluation import SearchResult, configurations, pipeline, search
from derivations.analyses.ranking import SORTS, first_per_layout, layout_index, order, ranked
from derivations.analyses.rows import BYTE_KEYS, ROW_KEYS, TIME_KEYS, columns, row_keys, rows
from derivations.analyses.timing import add_time

__all__ = [
    # symbolic.search, the kernel
    "FACTOR_ABOVE", "divisors", "evaluate", "factored",
    # enumeration
    "LAYOUT_FIELDS", "MAX_GPUS", "Enumeration", "distinct_stages", "enumerate_layouts", "lattice", "rejections",
    # evaluation (the generated kernels: derivations/analyses/kernels.py)
    "SearchResult", "configurations", "pipeline", "search",
    # ranking
    "SORTS", "first_per_layout", "layout_index", "order", "ranked",
    # rows
    "BYTE_KEYS", "ROW_KEYS", "TIME_KEYS", "columns", "row_keys", "rows",
    # the step time (derivations/steptime)
    "add_time",
]
