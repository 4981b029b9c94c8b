"""DeepSeek-V4's own symbols (notation.toml), registered beside the paper's on import (derivations/notation.py):
d_a, g_O, d_O, n_hc, t_S, w, m_C, m_H and a stage's counts of CSA, HCA and learned-router layers (FAMILY.counts)."""
from __future__ import annotations

from pathlib import Path

import sympy as sp

from derivations.notation import DEFINITIONS, NOT_FP32, V_VIEW, read_symbols, register, s

_ENTRIES = read_symbols(Path(__file__).with_name("notation.toml"))
SYMBOLS = register(e for e in _ENTRIES if e.role != "derived")
d_a, g_O, d_O, n_hc, t_S, w, m_C, m_H, L_C, L_H, L_R = (
    SYMBOLS[k] for k in ("d_a", "g_O", "d_O", "n_hc", "t_S", "w", "m_C", "m_H", "L_C", "L_H", "L_R"))
#: Derived symbols of V4's activation terms, kept for display and replaced by their definition before evaluation
#: (derivations/notation.py): the compressed entries of a CSA and an HCA layer, and three indicators.
_DERIVED = register((e for e in _ENTRIES if e.role == "derived"), definitions={})
T_C, T_H, u_kv, u_hca, u_cast = (_DERIVED[k] for k in ("T_C", "T_H", "u_kv", "u_hca", "u_cast"))
#: This family's derived symbols (derivations/generate.py prints a family's own definitions, not another's).
DERIVED = (T_C, T_H, u_kv, u_hca, u_cast)
#: Their definitions: floor(s / m), and indicators, two of them the notation's storage indicators (V_VIEW, NOT_FP32).
DEFINITIONS.update({T_C: sp.floor(s / m_C), T_H: sp.floor(s / m_H), u_kv: V_VIEW,
                    u_hca: sp.Piecewise((1, sp.Ge(s, m_H)), (0, True)), u_cast: NOT_FP32})
