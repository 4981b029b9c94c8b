"""``--efficiency published``: efficiencies from published benchmarks (``derivations/config/efficiency.toml``),
interpolated linearly in log2 of the shape between the published points, constant beyond them, never fitted.

* GEMMs: DeepGEMM's TFLOPS at DeepSeek-V3's shapes over the GPU's peak, dense products at M = b s / (CP TP) rows,
  the routed experts' grouped GEMM at M = b s EP N_r / (CP TP E) per expert; under MXFP8 on a GPU with an MXFP8
  rate (Blackwell) NVIDIA's published MXFP8 grouped GEMM on GB200 (``gemm_grouped_mxfp8``).
* Attention: cuDNN's fused attention (FlashAttention-3's H100 figures) by sequence length, backward = 2.5 forwards.
* Dispatch and combine: DeepEP's and HybridEP's algorithm bandwidths over the link's nominal, by EP size; behind
  another micro-batch's compute (--overlap megatron:ep) the share of the GPU's SMs they hold (:func:`overlap_sms`).

:func:`eta` is the one efficiency giving a phase its parts' time: sum f_i / Phi_i over sum f_i / (eta_i Phi_i).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

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
        for t in (*data["ep_nvlink"], data["ep_network"]):  # (the GEMMs' and attention's: read by listing)
            gpu_presets.gpu(t["gpu"])
        for key in data["ep_overlap_sms"]["gpus"]:
            gpu_presets.gpu(key)
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


def _grouped(gpu, precision: str) -> str:
    """The table of the experts' grouped GEMM at ``precision`` on ``gpu``: GB200's MXFP8 one under MXFP8 on NVIDIA,
    else DeepGEMM's."""
    mx = precision == "mxfp8" and gpu is not None and gpu.name.startswith("NVIDIA")
    return "gemm_grouped_mxfp8" if mx else "gemm_grouped"


def gemm(rows, grouped: bool = False, gpu=None, precision: str = "bf16") -> np.ndarray:
    """Efficiency of a GEMM (grouped: the experts' per group) of ``rows`` rows (array) at ``precision`` (the recipe's
    rate name) on ``gpu`` (a preset; None: Hopper's tables)."""
    name = _grouped(gpu, precision) if grouped else "gemm_dense"
    if name == "gemm_grouped_mxfp8":
        return np.full(np.shape(rows), _rate(tables()[name]))
    x, y = _by_rows(tables()[name])
    return np.interp(np.log2(np.maximum(np.asarray(rows, dtype=np.float64), 1.0)), x, y)


def _rate(t: Dict) -> float:
    """A one-point table's published TFLOPS over its GPU's peak at its precision."""
    return t["tflops"] * 1e12 / gpu_presets.gpu(t["gpu"]).rate(t["precision"])


def attention(seq, t: Dict = None) -> np.ndarray:
    """The fused attention's efficiency at sequence lengths ``seq`` (array): forward and backward at their
    published rates, one forward's FLOPs and 2.5 (the backward) per forward, over the GPU's BF16 peak (``t``: the
    attention table; None: efficiency.toml's)."""
    t = tables()["attention"] if t is None else t
    pts = np.array(t["points"], dtype=np.float64)
    eff = 3.5e12 / (1 / pts[:, 1] + 2.5 / pts[:, 2]) / gpu_presets.gpu(t["gpu"]).rate(t["precision"])
    return np.interp(np.log2(np.asarray(seq, dtype=np.float64)), np.log2(pts[:, 0]), eff)


def _nvlink(gpu) -> Dict:
    """The ep_nvlink table of ``gpu``'s generation (a preset; the first table for a GPU none names)."""
    nv = tables()["ep_nvlink"]
    return next((t for t in nv if gpu is not None and gpu.key in t["gpus"]), nv[0])


def _by_ranks(t: Dict, ep) -> np.ndarray:
    """A bandwidth table's mean of dispatch and combine over its nominal bandwidth at EP sizes ``ep``."""
    pts = np.array(t["points"], dtype=np.float64)
    return np.interp(np.asarray(ep, dtype=np.float64), pts[:, 0], (pts[:, 1] + pts[:, 2]) / 2 * 1e9) / t["nominal"]


def links(ep, gpu=None) -> Dict[str, np.ndarray]:
    """{'nvlink', 'network'}: the fraction of each link's bandwidth the experts' dispatch and combine reach on
    ``gpu`` (a preset; None: Hopper's)."""
    return {"nvlink": _by_ranks(_nvlink(gpu), ep), "network": _by_ranks(tables()["ep_network"], ep)}


def overlap_sms(gpu, dispatcher: str) -> float:
    """The share of ``gpu``'s SMs (a preset) the ``dispatcher``'s kernels hold while they run behind compute: 0 where
    efficiency.toml names no SM count for either."""
    t = tables()["ep_overlap_sms"]
    held, sms = t["dispatcher"].get(dispatcher), t["gpus"].get(getattr(gpu, "key", None))
    return held / sms if held and sms else 0.0


def measured(gpu=None, precision: str = "bf16") -> List[Tuple[str, Dict]]:
    """[(kernel kind, table)]: the table each kind reads on ``gpu`` (a preset) at ``precision``; a table's ``gpu`` is
    the GPU its source measured, whose fraction of peak is applied to ``gpu``'s."""
    t = tables()
    return [("GEMM", t["gemm_dense"]), ("grouped GEMM", t[_grouped(gpu, precision)]), ("attention", t["attention"]),
            ("EP NVLink", _nvlink(gpu)), ("EP network", t["ep_network"])]


def listing(t: Dict = None):
    """Every efficiency and bandwidth fraction ``--efficiency published`` reads (of ``t``, efficiency.toml's tables;
    None: :func:`tables`), with its source: [(name, value or table, source)]."""
    t = tables() if t is None else t
    return [("gemm_dense", dict(zip(*(a.tolist() for a in _by_rows(t["gemm_dense"])))), t["gemm_dense"]["source"]),
            ("gemm_grouped", dict(zip(*(a.tolist() for a in _by_rows(t["gemm_grouped"])))),
             t["gemm_grouped"]["source"]),
            ("gemm_grouped_mxfp8", _rate(t["gemm_grouped_mxfp8"]), t["gemm_grouped_mxfp8"]["source"]),
            ("attention", {int(p[0]): float(attention(p[0], t["attention"])) for p in t["attention"]["points"]},
             t["attention"]["source"]),
            *((f"ep_nvlink {'/'.join(nv['gpus'])}", {int(p[0]): float(_by_ranks(nv, p[0])) for p in nv["points"]},
               nv["source"]) for nv in t["ep_nvlink"]),
            ("ep_network", {int(p[0]): float(_by_ranks(t["ep_network"], p[0])) for p in t["ep_network"]["points"]},
             t["ep_network"]["source"]),
            ("ep_overlap_sms", {f"{d} on {g}": held / sms for d, held in t["ep_overlap_sms"]["dispatcher"].items()
                                for g, sms in t["ep_overlap_sms"]["gpus"].items()}, t["ep_overlap_sms"]["source"])]
