"""GPU presets (``--gpu NAME``): the memory a training job can use on an accelerator, as data
(``derivations/config/gpus.toml``: cudaMemGetInfo's total from a published log, with its source), less the CUDA
context."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, Tuple

from symbolic.errors import ConfigError, did_you_mean
from symbolic.units import parse_size

DATA = Path(__file__).with_name("gpus.toml")
#: the rates a preset may give (gpus.toml's header says what each is)
RATES = ("bf16", "fp8", "mxfp8", "nvfp4", "hbm_bandwidth", "nvlink", "network")
#: The CUDA context a process creates before its first allocation (driver, lazily loaded kernels): about 400 MB with
#: CUDA >= 11.7 and lazy module loading (pytorch/pytorch#109888, ptrblck); taken from the total of every GPU.
CONTEXT = 400 * 10 ** 6
CONTEXT_SOURCE = "pytorch/pytorch#109888 (CUDA >= 11.7, lazy module loading: about 400MB)"


@dataclass(frozen=True)
class GPU:
    """key: the preset's name; total: cudaMemGetInfo's total in bytes; source: the log it was read from."""

    key: str
    name: str
    total: int
    source: str
    aliases: Tuple[str, ...] = ()
    #: published rates of the step-time model (derivations/steptime): {'bf16', 'fp8', 'mxfp8', 'nvfp4' (dense
    #: FLOP/s), 'hbm_bandwidth', 'nvlink', 'network' (bytes/s, one direction per GPU)}; 'rates_source' says where from
    rates: Tuple[Tuple[str, float], ...] = ()
    rates_source: str = ""
    #: GPUs one NVLink fabric joins (8 in an HGX node, 72 in an NVL72 rack): the default --nvlink-domain
    nvlink_domain: int = 8

    @property
    def capacity(self) -> int:
        """The bytes a job can use: cudaMemGetInfo's total less the CUDA context (:data:`CONTEXT`)."""
        return self.total - CONTEXT

    def rate(self, name: str):
        """A published rate (RATES) of this GPU, or None when the datasheet gives none (the A100 has no FP8)."""
        return dict(self.rates).get(name)

    def to_json(self) -> Dict:
        return {"key": self.key, "name": self.name, "capacity": self.capacity, "total": self.total,
                "context": CONTEXT, "source": self.source}


@lru_cache(maxsize=1)
def presets() -> Dict[str, GPU]:
    with open(DATA, "rb") as fh:
        data = tomllib.load(fh)
    out = {}
    for key, e in data.items():
        rates = tuple((r, float(e[r])) for r in RATES if r in e)
        out[key] = GPU(key, e["name"], parse_size(e["total"]), e["source"], tuple(e.get("aliases", ())),
                       rates, e.get("rates_source", ""), int(e.get("nvlink_domain", 8)))
    return out


def gpu(name: str) -> GPU:
    """The preset named ``name`` (or one of its aliases), case-insensitive."""
    key = str(name).strip().lower()
    for g in presets().values():
        if key == g.key or key in g.aliases:
            return g
    cards = [k for k in presets() if k.startswith(key + "-")]
    if len(cards) > 1:  # a100: the 40 GB or the 80 GB card, whose capacities differ by half
        raise ConfigError("gpu", f"--gpu {name!r} names {len(cards)} cards of different memory: give one of "
                                 f"{', '.join(cards)}")
    raise ConfigError("gpu", f"unknown GPU {name!r}{did_you_mean(key, presets())}: use one of "
                             f"{', '.join(presets())} or --hbm SIZE")


def budget(hbm=None, gpu_name=None) -> Tuple[int, GPU | None]:
    """(bytes, preset or None) from ``--hbm SIZE`` or ``--gpu NAME`` (one of them)."""
    if hbm is not None and gpu_name is not None:
        raise ConfigError("hbm", "give --hbm SIZE or --gpu NAME, not both")
    if gpu_name is not None:
        g = gpu(gpu_name)
        return g.capacity, g
    if hbm is None:
        return None, None
    return parse_size(hbm), None
