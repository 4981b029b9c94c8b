"""Configuration search, the single import point (``from derivations.analyses import search as S``): the valid
layouts (enumeration.py), every configuration at its most-loaded stage (device, under a schedule) against the Sec. 6
peak ``(1 + f_frag) * total + M_buf`` (evaluation.py, exact.py), the fitting ones ranked (ranking.py), as rows
(rows.py).
"""
from __future__ import annotations

# ruff: noqa: F401 (the search's names, re-exported)
from symbolic.search import divisors, evaluate

from derivations.analyses.enumeration import (LAYOUT_FIELDS, MAX_GPUS, Enumeration, distinct_stages,
                                              enumerate_layouts, lattice, rejections)
from derivations.analyses.evaluation import SearchResult, configurations, pipeline, search
from derivations.analyses.exact import Columns
from derivations.analyses.ranking import SORTS, first_per_layout, order, ranked, ranked_judged
from derivations.analyses.rows import (BYTE_KEYS, JUDGED_KEYS, ROW_KEYS, TIME_KEYS, columns, configuration,
                                       row_keys, rows)
from derivations.analyses.timing import add_time
