"""Tensor families of a trace: each recorded storage named by its module (layer index
dropped), the kind of layer and its dtype, so that families sum over layers and experts."""
from __future__ import annotations

import re
from typing import Dict


def family(r, kinds=None) -> str:
    mod = re.sub(r"layers\.\d+\.", "layers.*.", r.module or "(no module)")
    if r.layer is None and r.sublayer == "shared":
        mod = "shared by several layers"
    return f"{mod} {r.dtype}"


def families(rec, saved=None) -> Dict[str, Dict]:
    """Bytes and storage count per family of the storages held at the end of the forward (or of ``saved``)."""
    out: Dict[str, Dict] = {}
    for r in rec.held() if saved is None else saved:
        f = out.setdefault(family(r), {"bytes": 0, "count": 0})
        f["bytes"] += r.nbytes
        f["count"] += 1
    return out
