"""DeepSeek-V4's own symbols, registered beside the paper's on import (derivations/notation.py): d_a, g_O, d_O, n_hc,
t_S, w, m_C, m_H and a stage's counts of CSA, HCA and learned-router layers (FAMILY.counts)."""
from __future__ import annotations

import sympy as sp

from derivations.notation import DEFINITIONS, NOT_FP32, V_VIEW, SymbolInfo, register, s

V4 = "DeepSeek-V4 (transformers 5.24 models/deepseek_v4, DeepseekV4Config)"

SYMBOLS = register([
    SymbolInfo("d_a", "d_{a}", "head dimension of every query head and of the one shared key-value head (HF head_dim)",
               "model", V4),
    SymbolInfo("g_O", "g_{O}", "groups of heads of the grouped output projection (HF o_groups)", "model", V4),
    SymbolInfo("d_O", "d_{O}", "rank of the grouped output projection per group (HF o_lora_rank)", "model", V4),
    SymbolInfo("n_hc", "n_{hc}", "hyper-connection streams per token (HF hc_mult)", "model", V4),
    SymbolInfo("t_S", "t_{S}", "Sinkhorn iterations of a hyper-connection's mixing (HF hc_sinkhorn_iters)", "model",
               V4),
    SymbolInfo("w", "w", "sliding window of every attention layer (HF sliding_window)", "model", V4),
    SymbolInfo("m_C", "m_{C}", "tokens per compressed entry of compressed sparse attention (HF compress_rates, CSA)",
               "model", V4),
    SymbolInfo("m_H", "m_{H}", "tokens per compressed entry of heavily compressed attention (HF compress_rates, HCA)",
               "model", V4),
    SymbolInfo("L_C", "L_{C}", "layers with compressed sparse attention (CSA) held by the stage", "stage", V4,
               nonnegative_only=True),
    SymbolInfo("L_H", "L_{H}", "layers with heavily compressed attention (HCA) held by the stage", "stage", V4,
               nonnegative_only=True),
    SymbolInfo("L_R", "L_{R}", "MoE layers with a learned router (and its score-correction bias) held by the stage",
               "stage", V4, nonnegative_only=True),
])
d_a, g_O, d_O, n_hc, t_S, w, m_C, m_H, L_C, L_H, L_R = (
    SYMBOLS[k] for k in ("d_a", "g_O", "d_O", "n_hc", "t_S", "w", "m_C", "m_H", "L_C", "L_H", "L_R"))

#: Derived symbols of V4's activation terms, each kept for display and replaced by its definition before evaluation
#: (derivations/notation.py): the compressed entries of a CSA and an HCA layer, and three indicators.
_DERIVED = register([
    SymbolInfo("T_C", "T_{C}", "compressed key-value entries of a CSA layer, floor(s / m_C) (leftover tokens make "
               "none)", "derived", V4, nonnegative_only=True),
    SymbolInfo("T_H", "T_{H}", "compressed key-value entries of an HCA layer, floor(s / m_H)", "derived", V4,
               nonnegative_only=True),
    SymbolInfo("u_kv", "\\delta_{kv}",
               "1 when eager attention keeps the shared key-value head as one storage (b = 1 or "
               "one head on the device, n_h = TP), else 0 (K^T and V are copied per head)", "derived", V4,
               nonnegative_only=True),
    SymbolInfo("u_hca", "\\delta_{hca}", "1 when an HCA layer has a compressed entry (s >= m_H), else 0", "derived", V4,
               nonnegative_only=True),
    SymbolInfo("u_cast", "\\delta_{cast}", "1 unless B_a = 4 (a cast to FP32 is then no copy), else 0", "derived", V4,
               nonnegative_only=True),
], definitions={})
T_C, T_H, u_kv, u_hca, u_cast = (_DERIVED[k] for k in ("T_C", "T_H", "u_kv", "u_hca", "u_cast"))
#: This family's derived symbols (derivations/generate.py prints a family's own definitions, not another's).
DERIVED = (T_C, T_H, u_kv, u_hca, u_cast)
#: Their definitions: floor(s / m), and indicators, two of them the notation's storage indicators (V_VIEW, NOT_FP32).
DEFINITIONS.update({T_C: sp.floor(s / m_C), T_H: sp.floor(s / m_H), u_kv: V_VIEW,
                    u_hca: sp.Piecewise((1, sp.Ge(s, m_H)), (0, True)), u_cast: NOT_FP32})
