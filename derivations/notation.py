"""The symbol registry of the paper (Table 1 and the other tables) and of memsym's extensions, read from notation.toml
(:mod:`symbolic.notation` holds them): Python name, the paper's LaTeX, meaning, role, sympy assumptions. Derived
symbols (``E_token``, ``EDP``) are kept for display and replaced by their definition before evaluation
(:func:`expand_derived`)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Dict

import sympy as sp

from derivations import constants as _values

from symbolic import tomlfile
from symbolic.notation import (DEFINITIONS, FACTOR_ORDER, REGISTRY, SYMBOLS, SymbolInfo,  # noqa: F401
                               expand_derived, latex_names, register, symbol)


def read_symbols(path) -> list:
    """The :class:`SymbolInfo` entries of a notation file (its ``[[symbol]]`` tables, in order)."""
    with tomlfile.package_data(path) as data:
        return [SymbolInfo(**{**e, "aliases": tuple(e.get("aliases", ()))}) for e in data["symbol"]]


register(read_symbols(Path(__file__).with_name("notation.toml")))

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
