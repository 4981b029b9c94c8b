"""``--efficiency published``: the step-time model's efficiencies from published benchmarks
(``derivations/config/efficiency.toml``), interpolated by shape, never fitted.

* GEMMs: DeepGEMM's published TFLOPS at DeepSeek-V3's shapes, over the GPU's peak, at the rows M a product has:
  at each published M the shapes' FLOPs over their time (sum 2MNK / sum 2MNK/TFLOPS), then linear in log2 M between
  the published M and constant beyond them.  Dense products (attention projections, dense and shared FFNs, head) run
  at M = b s / (CP TP) rows; the routed experts' grouped GEMM at M = b s EP N_r / (CP TP E) rows per expert
  (balanced routing).  Under the MXFP8 recipe on an NVIDIA GPU with block-scaled tensor cores (an MXFP8 rate in
  gpus.toml: Blackwell) the experts' grouped GEMM reads NVIDIA's published MXFP8 grouped GEMM on GB200 at
  DeepSeek-V3's expert shape instead (``gemm_grouped_mxfp8``: one point, its M not stated); not under BF16 or FP8
  recipes (another kernel) and not on AMD (another library).
* Attention: FlashAttention-3's published TFLOPS over the H100's BF16 peak.
* The experts' dispatch and combine: DeepEP's published bottleneck bandwidths over the link's nominal one, NVLink's
  and the network's (by EP size, constant beyond the published sizes).

The model has one efficiency eta for a phase's matrix products (derivations/steptime/model.py): :func:`eta` is the
one that gives the phase the time its parts take at their own efficiencies, sum f_i / Phi_i over
sum f_i / (eta_i Phi_i).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Dict

import numpy as np

from symbolic import tomlfile

from derivations.config import gpus as gpu_presets

DATA = Path(__file__).resolve().parent.parent / "config" / "efficiency.toml"


@lru_cache(maxsize=1)
def tables() -> Dict:
    """efficiency.toml's tables, every value the readers below take read once inside package_data's block (a
    key missing or a value malformed: one line naming the file, exit 2)."""
    with tomlfile.package_data(DATA) as data:
        listing(data)
        return data


def _by_rows(t: Dict):
    """(log2 M, efficiency) of a GEMM table: each published M's FLOP-weighted rate over the GPU's peak."""
    peak = gpu_presets.gpu(t["gpu"]).rate(t["precision"])
    ms = sorted({p[0] for p in t["points"]})
    eff = []
    for m in ms:
        pts = [p for p in t["points"] if p[0] == m]
        flops = sum(2.0 * p[0] * p[1] * p[2] for p in pts)
        seconds = sum(2.0 * p[0] * p[1] * p[2] / (p[3] * 1e12) for p in pts)
        eff.append(flops / seconds / peak)
    return np.log2(ms), np.array(eff)


def gemm(rows, grouped: bool = False, gpu=None, precision: str = "bf16") -> np.ndarray:
    """Efficiency of a GEMM (grouped: the experts' per group) of ``rows`` rows (array) at ``precision`` (the recipe's
    rate name) on ``gpu`` (a preset; None: Hopper's tables)."""
    if grouped and precision == "mxfp8" and gpu is not None and gpu.name.startswith("NVIDIA"):
        return np.full(np.shape(rows), _rate(tables()["gemm_grouped_mxfp8"]))
    x, y = _by_rows(tables()["gemm_grouped" if grouped else "gemm_dense"])
    return np.interp(np.log2(np.maximum(np.asarray(rows, dtype=np.float64), 1.0)), x, y)


def _rate(t: Dict) -> float:
    """A one-point table's published TFLOPS over its GPU's peak at its precision."""
    return t["tflops"] * 1e12 / gpu_presets.gpu(t["gpu"]).rate(t["precision"])


def attention() -> float:
    return _rate(tables()["attention"])


def links(ep) -> Dict[str, np.ndarray]:
    """{'nvlink', 'network'}: the fraction of each link's bandwidth the experts' dispatch and combine reach."""
    nv, net = tables()["ep_nvlink"], tables()["ep_network"]
    pts = np.array(net["points"], dtype=np.float64)
    network = np.interp(np.asarray(ep, dtype=np.float64), pts[:, 0], (pts[:, 1] + pts[:, 2]) / 2 * 1e9) / net["nominal"]
    return {"nvlink": np.full(np.shape(ep), float(np.mean(nv["achieved"])) / nv["nominal"]), "network": network}


def listing(t: Dict = None):
    """Every efficiency and bandwidth fraction ``--efficiency published`` reads (of ``t``, efficiency.toml's tables;
    None: :func:`tables`), with its source: [(name, value or table, source)]."""
    t = tables() if t is None else t
    return [("gemm_dense", dict(zip(*(a.tolist() for a in _by_rows(t["gemm_dense"])))), t["gemm_dense"]["source"]),
            ("gemm_grouped", dict(zip(*(a.tolist() for a in _by_rows(t["gemm_grouped"])))),
             t["gemm_grouped"]["source"]),
            ("gemm_grouped_mxfp8", _rate(t["gemm_grouped_mxfp8"]), t["gemm_grouped_mxfp8"]["source"]),
            ("attention", _rate(t["attention"]), t["attention"]["source"]),
            ("ep_nvlink", float(np.mean(t["ep_nvlink"]["achieved"])) / t["ep_nvlink"]["nominal"],
             t["ep_nvlink"]["source"]),
            ("ep_network", {int(p[0]): (p[1] + p[2]) / 2e0 * 1e9 / t["ep_network"]["nominal"]
                            for p in t["ep_network"]["points"]}, t["ep_network"]["source"])]
