"""Measured traces as data: ``paper/traces/*.toml`` (issue 12).

Each record holds the config (path and SHA-256 of its bytes), the settings, the framework
and its versions, the measured bytes per layer, outside the layers and per tensor family,
and the command that produced it (``memsym trace ... --record FILE``).  A record the preset
does not predict yet carries ``unexplained`` (why) and ``unexplained_bytes`` (measured minus
predicted, per layer and outside), so any change on either side is noticed.  Reading needs
no torch; :func:`retrace` (torch) measures a record's settings again.
"""
from __future__ import annotations

import hashlib
import json
import os
import tomllib
from typing import Dict, List


SETTINGS = ("framework", "model", "mbs", "seq", "act_dtype", "attention", "experts", "recompute")


def traces_dir() -> str:
    from symbolic.resources import PAPER_DIR
    return str(PAPER_DIR / "traces")


def load_all(directory: str = None) -> List[Dict]:
    d = directory or traces_dir()
    out = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.endswith(".toml"):
            with open(os.path.join(d, name), "rb") as f:
                rec = tomllib.load(f)
            rec["_file"] = name
            out.append(rec)
    return out


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def command(settings: Dict) -> str:
    s = settings
    return (f"python -m memsym trace --framework {s['framework']} --model {s['model']} --mbs {s['mbs']} "
            f"--seq {s['seq']} --act-dtype {s['act_dtype']} --attention {s['attention']} --experts {s['experts']} "
            f"--recompute {s['recompute']}")


def _v(x) -> str:
    return json.dumps(x)  # TOML basic strings and integers are JSON's


def to_toml(out: Dict, unexplained: str = "") -> str:
    """A record of one ``trace`` result (see the module docstring)."""
    s, m, p = out["settings"], out["measured"], out["predicted"]
    lines = [f"# measured by: {command(s)} --record FILE", f"command = {_v(command(s))}",
             f"framework = {_v(s['framework'])}", "",
             "[config]", f"path = {_v(s['model'])}", f"sha256 = {_v(sha256(s['model']))}", "",
             "[settings]"] + [f"{k} = {_v(s[k])}" for k in SETTINGS if k not in ("framework", "model")] + [
             "", "[versions]"] + [f"{k} = {_v(v)}" for k, v in sorted(out["versions"].items())] + [
             "", "[measured]",
             "activations_by_layer = [" + ", ".join(
                 f'{{layer = {r["layer"]}, kind = {_v(r["kind"])}, bytes = {r["bytes"]}}}'
                 for r in m["activations_by_layer"]) + "]",
             f"activations_outside_layers = {m['activations_outside_layers']}"]
    if unexplained:
        pl = {r["layer"]: r["bytes"] for r in p["activations_by_layer"]}
        lines += ["", "[unexplained]", f"why = {_v(unexplained)}", f"preset = {_v(p['conventions'])}",
                  "by_layer = [" + ", ".join(str(r["bytes"] - pl[r["layer"]]) for r in m["activations_by_layer"])
                  + "]", f"outside_layers = {m['activations_outside_layers'] - p['activations_outside_layers']}"]
    lines += ["", "[measured.families]"] + [f"{_v(k)} = {v['bytes']}" for k, v in sorted(m["families"].items())]
    return "\n".join(lines) + "\n"


def config_path(rec: Dict) -> str:
    """The record's config file: its path as recorded, relative to the checkout (the folder that
    holds ``paper/``) unless absolute, so a report run from any directory finds it."""
    from symbolic.resources import PAPER_DIR
    path = rec["config"]["path"]
    if os.path.isabs(path):
        return path
    return str(PAPER_DIR.parent / path)


def predict(rec: Dict, preset: str = None) -> Dict:
    """``estimate --json``'s per-layer bytes at a record's settings (no torch)."""
    import types

    from .compare import predicted
    st = rec["settings"]
    args = types.SimpleNamespace(model=config_path(rec), framework=rec["framework"], **st)
    return predicted(args, preset or rec["framework"])


def retrace(rec: Dict) -> Dict:
    """Measure a record's settings again (needs the trace extra): the ``trace`` result."""
    import types

    from .compare import result
    from . import hf, mcore
    st = rec["settings"]
    impl = mcore if rec["framework"] == "mcore" else hf
    rec_, info = impl.run(config_path(rec), st["mbs"], st["seq"], st["act_dtype"], st["attention"],
                        st["experts"], st["recompute"])
    args = types.SimpleNamespace(model=config_path(rec), framework=rec["framework"], conventions=None,
                                 tensors=False, **st)
    return result(args, rec_, info)
