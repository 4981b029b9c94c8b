"""The symbol registry of the paper (Table 1 and the other tables) and of memsym's extensions (:mod:`symbolic.notation`
holds them): Python name, the paper's LaTeX, meaning, role, sympy assumptions. Derived symbols (``E_token``, ``EDP``)
are kept for display and replaced by their definition before evaluation (:func:`expand_derived`)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Dict

import sympy as sp

from derivations import constants as _values

from symbolic.notation import (DEFINITIONS, FACTOR_ORDER, REGISTRY, SYMBOLS, SymbolInfo,  # noqa: F401
                               expand_derived, latex_names, register, symbol)

_ENTRIES = [
    # --- Table 1: model dimensions ------------------------------------------------
    SymbolInfo("h", "h", "hidden size", "model", "Table 1"),
    SymbolInfo("h_E", "h_E", "intermediate size of one MoE expert", "model", "Table 1"),
    SymbolInfo("h_F", "h_F", "intermediate size of the dense FFN", "model", "Table 1"),
    SymbolInfo("d_h", "d_h", "per-head dimension of the q/k content part", "model", "Table 1"),
    SymbolInfo("d_v", "d_v", "per-head value dimension (the paper writes d_h; HF v_head_dim)", "model",
               "HF config v_head_dim (equals d_h in the paper)"),
    SymbolInfo("n_h", "n_h", "number of attention heads", "model", "Table 1"),
    SymbolInfo("d_cq", "d_c'", "query compression (LoRA) rank", "model", "Table 1",
               aliases=("d_c'", "d_c^'", "d_{c}'", "d_c^{\\prime}", "d_{c}^{\\prime}", "d_{cq}", "d_c^\\prime")),
    SymbolInfo("d_hr", "d_h^R", "per-head dimension of the decoupled RoPE query/key", "model", "Table 1",
               aliases=("d_h^R", "d_{h}^{R}", "d_h^{R}", "d_{hr}", "d_{h}^R")),
    SymbolInfo("d_c", "d_c", "key-value compression rank", "model", "Table 1"),
    SymbolInfo("N", "N", "number of routed experts per MoE layer", "model", "Table 1"),
    SymbolInfo("N_s", "N_s", "number of shared experts per MoE layer", "model", "Table 1"),
    SymbolInfo("N_r", "N_r", "routed experts chosen per token (top-k)", "model", "Table 1, Table 9"),
    SymbolInfo("n_g", "n_{g}", "expert groups of group-limited routing (HF n_group; 1: no groups)", "model",
               "extension (the group-limited router of transformers' DeepSeek-V3)"),
    SymbolInfo("k_g", "k_{g}", "expert groups kept per token (HF topk_group)", "model",
               "extension (the group-limited router of transformers' DeepSeek-V3)"),
    # routing indicators (0 or 1, from the config: ModelSpec.routing): which tensors each framework's router keeps
    SymbolInfo("u_v2", "\\delta_{V2}", "1 when transformers runs DeepSeek-V2's modelling code (model_type "
               "deepseek_v2: softmax scores, greedy or group-limited top-k, no top-k normalisation, complex RoPE "
               "tables), 0 for DeepSeek-V3's (deepseek_v3, kimi_k2)", "model",
               "extension (transformers models/deepseek_v2, deepseek_v3)", nonnegative_only=True),
    SymbolInfo("u_nt", "\\delta_{nt}", "1 when the top-k weights are normalised (HF norm_topk_prob; default true, "
               "false for deepseek_v2)", "model", "extension (transformers' DeepSeek-V3 router)",
               nonnegative_only=True),
    SymbolInfo("u_lg", "\\delta_{lg}", "1 when the top-k is group-limited greedy (HF topk_method "
               "group_limited_greedy)", "model", "extension (transformers' DeepSeek-V2 router)",
               nonnegative_only=True),
    SymbolInfo("u_sg", "\\delta_{\\sigma}", "1 when the router scores with a sigmoid, 0 with a softmax (HF "
               "scoring_func; default sigmoid, softmax for deepseek_v2)", "model",
               "extension (Megatron-Core router.py: the score function)", nonnegative_only=True),
    SymbolInfo("u_eb", "\\delta_{eb}", "1 with the expert bias of aux-loss-free balancing (HF topk_method "
               "noaux_tc)", "model", "extension (Megatron-Core router.py: the expert bias)",
               nonnegative_only=True),
    SymbolInfo("u_tw", "\\delta_{tw}", "1 when the head's weight is the embedding's (HF tie_word_embeddings)", "model",
               "extension (the head's weight gradient waits for the embedding's backward: step_terms.py)",
               nonnegative_only=True),
    SymbolInfo("u_gk", "\\delta_{gk}", "1 when Megatron-Core's top-k is group-limited (HF topk_group, or "
               "DeepseekV3Config's default when absent)", "model",
               "extension (Megatron-Core router.py: the group top-k)", nonnegative_only=True),
    # DeepSeek Sparse Attention (DeepSeek-V3.2; transformers models/deepseek_v32 DeepseekV32Indexer)
    SymbolInfo("n_I", "n_{I}", "heads of the DSA lightning indexer (HF index_n_heads)", "model",
               "extension (DeepSeek-V3.2-Exp: transformers models/deepseek_v32, DeepseekV32Indexer)"),
    SymbolInfo("d_I", "d_{I}", "head dimension of the DSA lightning indexer (HF index_head_dim)", "model",
               "extension (DeepSeek-V3.2-Exp: transformers models/deepseek_v32, DeepseekV32Indexer)"),
    SymbolInfo("k_I", "k_{I}", "tokens each query attends to under DSA (HF index_topk)", "model",
               "extension (DeepSeek-V3.2-Exp: transformers models/deepseek_v32, DeepseekV32Indexer)"),
    SymbolInfo("L_I", "L_{I}", "layers holding a DSA lightning indexer of their own held by the stage (every layer "
               "of DeepSeek-V3.2; GLM-5's 'full' layers, not its 'shared' ones)", "stage",
               "extension (transformers 5.24 models/glm_moe_dsa, GlmMoeDsaAttention)", nonnegative_only=True),
    SymbolInfo("l", "l", "number of transformer layers", "model", "Table 1"),
    SymbolInfo("v", "v", "vocabulary size", "model", "Table 1"),
    SymbolInfo("D", "D", "multi-token-prediction (MTP) modules, the MTP depth (HF num_nextn_predict_layers)",
               "model", "DeepSeek-V3 report Sec. 2.2 (not in the paper)", nonnegative_only=True),
    # --- Table 9: training settings -----------------------------------------------
    SymbolInfo("b", "b", "micro-batch size", "training", "Table 9"),
    SymbolInfo("s", "s", "sequence length", "training", "Table 9"),
    # --- Table 5: parallel layout --------------------------------------------------
    SymbolInfo("DP", "DP", "data-parallel degree", "parallel", "Table 5"),
    SymbolInfo("TP", "TP", "tensor-parallel degree", "parallel", "Table 5"),
    SymbolInfo("PP", "PP", "pipeline-parallel degree", "parallel", "Table 5"),
    SymbolInfo("EP", "EP", "expert-parallel degree", "parallel", "Table 5"),
    SymbolInfo("ETP", "ETP", "tensor-parallel degree inside one expert", "parallel", "Table 5"),
    SymbolInfo("SP", "SP", "sequence-parallel degree (SP = TP when on, 1 when off)", "parallel", "Table 9"),
    SymbolInfo("CP", "CP", "context-parallel degree", "parallel", "Table 9"),
    SymbolInfo("z", "z", "ZeRO stage (0 none, 1 os, 2 os+g, 3 os+g+params)", "parallel", "Sec. 4",
               nonnegative_only=True),
    # --- Table 7: bytes per element -------------------------------------------------
    SymbolInfo("B_w", "B_{w}", "bytes per weight (BF16: 2)", "bytes", "Table 7"),
    SymbolInfo("B_g", "B_{g}", "bytes per gradient (FP32: 4)", "bytes", "Table 7"),
    SymbolInfo("B_m", "B_{m}", "bytes per master-weight copy in the optimizer (FP32: 4)", "bytes", "Table 7"),
    SymbolInfo("B_1", "B_{1}", "bytes per first Adam moment, momentum (BF16: 2)", "bytes", "Table 7"),
    SymbolInfo("B_2", "B_{2}", "bytes per second Adam moment, variance (BF16: 2)", "bytes", "Table 7"),
    SymbolInfo("B_a", "B_{a}", "bytes per activation element (BF16: 2)", "bytes", "Table 7"),
    SymbolInfo("B_k", "B_{k}", "bytes per dropout-mask element (1)", "bytes", "Sec. 5.1"),
    SymbolInfo("B_f8", "B_{f8}", "bytes per activation element cached in FP8 (1; --fp8-activations)", "bytes",
               "DeepSeek-V3 report Sec. 3.3 (extension)"),
    SymbolInfo("B_o", "B_{o}", "bytes per element of the attention output cached for W^O in DeepSeek-V3's E5M6 "
                               "format (12 bits, packed: 3/2; --fp8-activations)", "bytes",
               "DeepSeek-V3 report Sec. 3.3 (extension)", integer=False),
    # --- extensions: pipeline schedule and routing (not in the paper) ---------------------
    SymbolInfo("n_mb", "m", "micro-batches per optimizer step on one pipeline (gradient-accumulation steps)",
               "schedule", "extension (pipeline schedules)"),
    SymbolInfo("n_fl", "n_{fl}", "micro-batches whose activations one device holds at its peak (in flight)",
               "schedule", "extension (pipeline schedules)", integer=False),
    SymbolInfo("VPP", "V", "virtual pipeline stages (model chunks) per device, interleaved schedule", "schedule",
               "extension (Megatron interleaved 1F1B)"),
    SymbolInfo("i_s", "i", "index of the pipeline stage (0-based)", "schedule", "extension (pipeline schedules)",
               nonnegative_only=True),
    SymbolInfo("F", "F", "routing imbalance: tokens of the busiest expert rank over the balanced average (>= 1)",
               "training", "extension (uneven routing; the paper has F = 1)", integer=False),
    # --- composition of one pipeline stage ------------------------------------------
    SymbolInfo("L_d", "L_{d}", "dense (FFN) transformer layers held by the stage", "stage", "Table 4",
               nonnegative_only=True),
    SymbolInfo("L_m", "L_{m}", "MoE transformer layers held by the stage", "stage", "Table 4",
               nonnegative_only=True),
    SymbolInfo("e_E", "\\delta_{E}", "1 if the stage holds the word embedding, else 0", "stage", "Table 3",
               nonnegative_only=True),
    SymbolInfo("e_H", "\\delta_{H}", "1 if the stage holds the output head and final norm, else 0", "stage",
               "Table 3", nonnegative_only=True),
    # --- Sec. 6 overheads --------------------------------------------------------------
    SymbolInfo("M_buf", "M_{buf}", "communication and temporary buffers per device, bytes", "overhead",
               "Sec. 6", integer=False),
    SymbolInfo("f_frag", "f_{frag}", "fragmentation, as a fraction of allocated memory", "overhead",
               "Sec. 6", integer=False),
    # --- derived ----------------------------------------------------------------------------
    SymbolInfo("E_token", "E_{token}", "tokens per routed expert on the busiest device, F b s N_r / (N CP) "
                                       "(F = 1: the paper's balanced average)",
               "derived", "Table 9", integer=False),
    SymbolInfo("EDP", "EDP", "expert data-parallel degree, DP TP CP / (EP ETP): the replicas of each expert shard "
               "(world / (PP EP ETP); the paper has CP = 1)", "derived", "Table 5"),
]

register(_ENTRIES)

# Module-level names for use in derivations: ``from derivations.notation import h, n_h``.
h = SYMBOLS["h"]; h_E = SYMBOLS["h_E"]; h_F = SYMBOLS["h_F"]; d_h = SYMBOLS["d_h"]; d_v = SYMBOLS["d_v"]
n_h = SYMBOLS["n_h"]; d_cq = SYMBOLS["d_cq"]; d_hr = SYMBOLS["d_hr"]; d_c = SYMBOLS["d_c"]
N = SYMBOLS["N"]; N_s = SYMBOLS["N_s"]; N_r = SYMBOLS["N_r"]; l = SYMBOLS["l"]; v = SYMBOLS["v"]
D = SYMBOLS["D"]; n_g = SYMBOLS["n_g"]; k_g = SYMBOLS["k_g"]
u_v2 = SYMBOLS["u_v2"]; u_nt = SYMBOLS["u_nt"]; u_lg = SYMBOLS["u_lg"]; u_sg = SYMBOLS["u_sg"]; u_eb = SYMBOLS["u_eb"]
u_gk = SYMBOLS["u_gk"]; u_tw = SYMBOLS["u_tw"]
#: The routing indicators (0 or 1, ModelSpec.routing): a tensor they make 0 is not made by the model's router.
ROUTING = (u_v2, u_nt, u_lg, u_sg, u_eb, u_gk)
b = SYMBOLS["b"]; s = SYMBOLS["s"]
DP = SYMBOLS["DP"]; TP = SYMBOLS["TP"]; PP = SYMBOLS["PP"]; EP = SYMBOLS["EP"]; ETP = SYMBOLS["ETP"]
SP = SYMBOLS["SP"]; CP = SYMBOLS["CP"]; z = SYMBOLS["z"]
B_w = SYMBOLS["B_w"]; B_g = SYMBOLS["B_g"]; B_m = SYMBOLS["B_m"]; B_1 = SYMBOLS["B_1"]; B_2 = SYMBOLS["B_2"]
B_a = SYMBOLS["B_a"]; B_k = SYMBOLS["B_k"]
L_d = SYMBOLS["L_d"]; L_m = SYMBOLS["L_m"]; e_E = SYMBOLS["e_E"]; e_H = SYMBOLS["e_H"]
M_buf = SYMBOLS["M_buf"]; f_frag = SYMBOLS["f_frag"]
E_token = SYMBOLS["E_token"]; EDP = SYMBOLS["EDP"]
B_f8 = SYMBOLS["B_f8"]; B_o = SYMBOLS["B_o"]
n_mb = SYMBOLS["n_mb"]; n_fl = SYMBOLS["n_fl"]; VPP = SYMBOLS["VPP"]; i_s = SYMBOLS["i_s"]; F = SYMBOLS["F"]

#: Definitions of the derived symbols, in base symbols.
DEFINITIONS.update({
    E_token: F * b * s * N_r / (N * CP),
    EDP: DP * TP * CP / (EP * ETP),
})

#: Storage indicators (0 or 1) of the tensor lists, for any family's definitions (reasons: derivations/tensors.py).
NOT_FP32 = sp.Piecewise((0, sp.Eq(B_a, 4)), (1, True))
B_IS_1 = sp.Piecewise((1, sp.Eq(b, 1)), (0, True))
V_VIEW = sp.Piecewise((1, sp.Eq(b, 1)), (1, sp.Eq(n_h, TP)), (0, True))
TOPK_GT_1 = sp.Piecewise((0, sp.Eq(N_r, 1)), (1, True))
#: 1 when EP > 1: the experts' tokens cross an all-to-all (torchtitan's ExpertParallel, only then applied).
EP_GT_1 = sp.Piecewise((0, sp.Eq(EP, 1)), (1, True))

#: Our notation into the paper's printed formulas: it writes d_h for d_v, and F = 1 (Table 9: E_token = b s N_r / N).
PAPER_IDENTITIES: Dict[sp.Symbol, sp.Expr] = {d_v: d_h, F: sp.Integer(1)}

#: Bytes per element of the paper's Table 7 (and Sec. 5.1's dropout mask), by symbol.
PAPER_BYTES: Dict[sp.Symbol, int] = {SYMBOLS[k]: v for k, v in _values.PAPER_BYTES.items()}

#: Values of the extension symbols that reproduce the paper (F = 1; the FP8 / E5M6 bytes of ``.fp8`` terms).
EXTENSION_DEFAULTS: Dict[sp.Symbol, object] = {SYMBOLS[k]: sp.sympify(v) for k, v in _values.EXTENSION_DEFAULTS.items()}

#: Order in which the paper writes factors of a product (``bsh``, ``b n_h s^2``).
PAPER_FACTOR_ORDER = ["n_fl", "B_w", "B_g", "B_m", "B_1", "B_2", "B_a", "B_k", "B_f8", "B_o", "L_d", "L_m", "e_E",
                      "e_H", "F", "b", "s", "N_r", "N", "N_s", "E_token", "n_h", "h", "h_E", "h_F", "d_cq", "d_c",
                      "d_h", "d_v", "d_hr", "v", "DP", "TP", "SP", "CP", "PP", "EP", "ETP", "EDP",
                      "n_mb", "VPP", "i_s"]
register((), factor_order=PAPER_FACTOR_ORDER)


#: {family: names of the symbols its own notation module registers} (a report lists another family's not), each
#: family's own symbols registered with the paper's (``derivations/families/<name>/notation.py``, found by file)
FAMILY_SYMBOLS: Dict[str, frozenset] = {}
for _path in sorted((Path(__file__).resolve().parent / "families").glob("*/notation.py")):
    _mod = importlib.import_module(f"derivations.families.{_path.parent.name}.notation")
    FAMILY_SYMBOLS[_path.parent.name] = frozenset(getattr(_mod, "SYMBOLS", {})) | frozenset(
        s.name for s in getattr(_mod, "DERIVED", ()))
