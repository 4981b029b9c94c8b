"""Measured traces as data (``paper/traces/*.toml``, written by ``memsym trace ... --record FILE``): the config
(path, SHA-256), settings, versions, measured bytes per layer, outside and per tensor family, and the command; a
record the preset does not predict yet keeps why and measured minus predicted (``[unexplained]``)."""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import tomllib
from typing import Dict, List
import types

from symbolic.resources import PAPER_DIR

from ..lines import one_line
from . import DATA, hf, mcore
from .compare import predicted, result
from .inputs import MCORE_BEFORE, MCORE_SETTINGS, SETTINGS, read


#: Megatron-Core's own settings, in its records only.
MCORE_SETTING_KEYS = tuple(MCORE_SETTINGS)
#: The notes of a record made with ``--fake`` and of its ``[measured.step]`` (trace.toml).
FAKE_NOTE, STEP_NOTE = DATA["notes"]["fake"], DATA["notes"]["step"]


def load_all(directory: str = None) -> List[Dict]:
    d = directory or str(PAPER_DIR / "traces")
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
    """The ``memsym trace`` command line of ``settings``, each value quoted for a POSIX shell."""
    s = settings
    return (f"python -m memsym trace --framework {shlex.quote(s['framework'])} --model {shlex.quote(s['model'])} "
            f"--mbs {s['mbs']} --seq {s['seq']} --act-dtype {shlex.quote(s['act_dtype'])} "
            f"--attention {shlex.quote(s['attention'])} --experts {shlex.quote(s['experts'])} "
            f"--recompute {shlex.quote(s['recompute'])}"
            + "".join(f" --{k.replace('_', '-')} {shlex.quote(s[k])}" for k in MCORE_SETTING_KEYS if k in s)
            + (" --fake" if s.get("fake") else "") + (" --step" if s.get("step") else ""))


_TOML_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string that tomllib reads back exactly (non-printables escaped); a lone surrogate
    (an undecodable byte) has no TOML form: ValueError."""
    out = ['"']
    for ch in str(text):
        if ch in _TOML_SHORT:
            out.append(_TOML_SHORT[ch])
        elif ch.isprintable():
            out.append(ch)
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            shown = repr(text) if len(text) <= 40 else repr(text[:24]) + "..."
            raise ValueError(f"{shown} holds {ch!r}, not a Unicode character (an undecodable byte?): a TOML "
                             f"record cannot hold it")
        else:
            out.append(f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}")
    return "".join(out) + '"'


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """A TOML key: bare when it may be (``A-Za-z0-9_-``), else a quoted :func:`toml_string`."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(x) -> str:
    """A TOML value: a string (:func:`toml_string`), an integer, a boolean, or a list or inline table of them."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, str):
        return toml_string(x)
    if isinstance(x, list):
        return "[" + ", ".join(map(toml_value, x)) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in x.items()) + "}"
    raise TypeError(f"a record holds strings and integers, got {type(x).__name__}")


def _pick(d: Dict, keys) -> Dict:
    """``d``'s ``keys`` in that order, a missing or None value as ""."""
    return {k: "" if d.get(k) is None else d[k] for k in keys}


def toml_table(name: str, d: Dict) -> List[str]:
    """The lines of the TOML table ``[name]`` holding ``d``."""
    return ["", f"[{name}]"] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in d.items()]


#: The largest record ``changes_of`` reads (a record is a few KB; its changes grow by one line per re-record).
MAX_RECORD_BYTES = 4 << 20


def changes_of(path: str) -> List[str]:
    """The ``changes`` the record at ``path`` lists (none when nothing is there); anything there that is not a
    record memsym wrote is a ValueError saying why (rewriting it would destroy it).  A FIFO is never read."""
    if os.path.islink(path):
        raise ValueError("is a symbolic link (name the record's file itself)")
    if not os.path.lexists(path):
        return []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opened so does not block
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("exists and is not a regular file")
        if st.st_size > MAX_RECORD_BYTES:
            raise ValueError(f"is {st.st_size:,} bytes, not a record (at most {MAX_RECORD_BYTES:,})")
        try:
            old = tomllib.loads(f.read(MAX_RECORD_BYTES + 1).decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"exists and is not a record ({type(exc).__name__})") from None
    if not isinstance(old.get("command"), str) or not isinstance(old.get("measured"), dict):
        raise ValueError("exists and is not a record (no command and [measured])")
    changes = old.get("changes", [])
    if not isinstance(changes, list) or not all(isinstance(c, str) for c in changes):
        raise ValueError("has a changes entry that is not a list of strings")
    return list(changes)


def to_toml(out: Dict, unexplained: str = "", sha256_of_config: str = None, changes: List[str] = ()) -> str:
    """A record of one ``trace`` result; every string from the user is a TOML string (data, never a key).
    ``sha256_of_config``: of the bytes traced, else of the file now; ``changes``: oldest first (``--change``)."""
    s, m, p = out["settings"], out["measured"], out["predicted"]
    digest = sha256_of_config or sha256(s["model"])
    top = {"command": command(s), "framework": s["framework"], "note": FAKE_NOTE if s.get("fake") else None,
           "changes": list(changes) or None}
    lines = [f"# measured by: {one_line(command(s))} --record FILE"]  # every non-printable character escaped
    lines += [f"{k} = {toml_value(v)}" for k, v in top.items() if v is not None]
    lines += toml_table("config", {"path": s["model"], "sha256": digest})
    lines += toml_table("settings", {**{k: s[k] for k in SETTINGS[2:] + MCORE_SETTING_KEYS if k in s},
                                     **{k: True for k in ("fake", "step") if s.get(k)}})
    lines += toml_table("versions", dict(sorted(out["versions"].items())))
    lines += toml_table("measured", {"activations_by_layer": [_pick(r, ("layer", "kind", "bytes"))
                                                              for r in m["activations_by_layer"]],
                                     "activations_outside_layers": m["activations_outside_layers"]})
    if unexplained:
        pl = {r["layer"]: r["bytes"] for r in p["activations_by_layer"]}
        lines += toml_table("unexplained", {
            "why": unexplained, "preset": p["conventions"],
            "by_layer": [r["bytes"] - pl[r["layer"]] for r in m["activations_by_layer"]],
            "outside_layers": m["activations_outside_layers"] - p["activations_outside_layers"]})
    lines += toml_table("measured.families", {k: v["bytes"] for k, v in sorted(m["families"].items())})
    if out.get("step"):
        lines += step_toml(out["step"])
    gone = m.get("discarded")
    if gone and gone["storages"]:  # saved by nodes freed during the forward (memsym/trace/recorder.py)
        lines += toml_table("measured.discarded", {"bytes": gone["bytes"], "storages": gone["storages"]})
        lines += toml_table("measured.discarded.families",
                            {k: v["bytes"] for k, v in sorted(gone["families"].items())})
    return "\n".join(lines) + "\n"


def step_toml(st: Dict) -> List[str]:
    """The ``[measured.step]`` lines of a profiled step (memsym/trace/step.py)."""
    where = ("phase", "node", "op", "module", "layer")
    lists = {"held_at_peak": ("what", "layer", "bytes"),
             "made_at_peak": ("phase", "module", "node", "op", "dtype", "shape", "bytes", "count"),
             "unsaved_at_end_of_forward": ("module", "op", "dtype", "shape", "bytes", "count")}
    step = {"note": STEP_NOTE, "peak": st["peak"], **_pick(st["at"], where),
            **{k: st[k] for k in ("reached", "end_of_forward", "saved_at_end_of_forward", "forward_peak")},
            "forward_peak_at": _pick(st["forward_peak_at"], where),
            **{k: [_pick(g, keys) for g in st[k]] for k, keys in lists.items()},
            "layers": [_pick(dict(r["at"], layer=r["layer"], peak=r["peak"]), ("layer", "peak") + where[:4])
                       for r in st["layers"]]}
    if st.get("expert_tokens"):
        step["expert_tokens"] = [_pick(r, ("layer", "counts")) for r in st["expert_tokens"]]
    # left out of the activation bytes (kernel scratch is this machine's: not recorded)
    return (toml_table("measured.step", step) + toml_table("measured.step.categories_at_peak",
                                                           st["categories_at_peak"])
            + toml_table("measured.step.left_out", {k: st["left_out"][k] for k in ("gradients_at_end", "rng")}))


def config_path(rec: Dict) -> str:
    """The record's config file: its path as recorded, relative to the checkout (the folder of ``paper/``)."""
    return str(PAPER_DIR.parent / rec["config"]["path"])


def settings_of(rec: Dict) -> Dict:
    """A record's settings; a Megatron-Core record without any of its own settings (made before they were
    options) ran :data:`memsym.trace.inputs.MCORE_BEFORE`, not today's defaults (the DeepSeek recipes')."""
    st = dict(rec["settings"])
    if rec.get("framework") == "mcore" and not any(k in st for k in MCORE_SETTING_KEYS):
        st.update(MCORE_BEFORE)
    return st


def predict(rec: Dict, preset: str = None) -> Dict:
    """``estimate --json``'s per-layer bytes at a record's settings (no torch)."""
    st = settings_of(rec)
    args = types.SimpleNamespace(model=config_path(rec), framework=rec["framework"], **st)
    return predicted(args, preset or rec["framework"])


def retrace(rec: Dict, step: bool = None) -> Dict:
    """Measure a record's settings again (the trace extra); ``step``: default as the record did."""
    st = settings_of(rec)
    st.setdefault("fake", False)
    st["step"] = bool(st.get("step")) if step is None else step
    impl = mcore if rec["framework"] == "mcore" else hf
    conf = read(config_path(rec))
    rec_, info = impl.run(conf.data, st["mbs"], st["seq"], st["act_dtype"], st["attention"], st["experts"],
                          st["recompute"], settings={k: st[k] for k in MCORE_SETTING_KEYS if k in st} or None,
                          fake=st.get("fake", False), step=st["step"])
    args = types.SimpleNamespace(model=config_path(rec), framework=rec["framework"], conventions=None,
                                 tensors=False, **st)
    return result(args, rec_, info, conf.model)
