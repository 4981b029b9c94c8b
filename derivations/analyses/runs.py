"""Measured training runs (``paper/runs.toml``: source, model, options, the measured number, its :data:`KINDS`
and rank) against memsym's predictions, compared exactly; nothing here feeds a measurement back into a term.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from derivations.analyses import allocator
from derivations.config.gpus import CONTEXT, gpu as gpu_preset
from derivations.config.presets import PRESETS
from symbolic import tomlfile
from symbolic.errors import ConfigError, did_you_mean
from symbolic.jsonfile import Bounds
from symbolic.resources import PAPER_DIR

#: The default file of runs.
RUNS_FILE = PAPER_DIR / "runs.toml"
#: The runs file's vocabulary (runs_schema.toml): kinds of measured number and what each is compared with, the
#: conventions presets that fit each framework (best first) and why, the [runs.layout] and [runs.training] keys (the
#: ``memsym estimate`` option each one is) and their types.
with tomlfile.package_data(Path(__file__).with_name("runs_schema.toml")) as _data:
    KINDS: Dict[str, str] = dict(_data["kinds"])
    CONFIDENCE, RANKS = tuple(_data["confidence"]), tuple(_data["ranks"])
    FRAMEWORK_PRESETS: Dict[str, Tuple[str, ...]] = {k: tuple(v) for k, v in _data["framework_presets"].items()}
    FRAMEWORK_WHY: Dict[str, str] = dict(_data["framework_why"])
    _TYPES = {"int": int, "str": str, "bool": bool, "list": list}
    LAYOUT_KEYS = {k: _TYPES[v] for k, v in _data["layout_keys"].items()}
    TRAINING_KEYS = {k: _TYPES[v] for k, v in _data["training_keys"].items()}
#: The band the issue asks of high-confidence max-allocated runs.
BAND = (Fraction(9, 10), Fraction(11, 10))

_REQUIRED = ("id", "title", "framework", "kind", "measured_bytes", "statistic", "rank", "gpus", "confidence",
             "confidence_why", "source", "model", "layout", "training")
_OPTIONAL = ("gpu", "notes", "flags", "conventions")
_SOURCE_REQUIRED = ("repository", "revision", "path")
_SOURCE_OPTIONAL = ("config", "url")
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,79}")
#: a runs file (paper/runs.toml, or --data): a few dozen KiB of [[runs]] tables with their [runs.*] tables
RUNS_BOUNDS = Bounds(max_bytes=1 << 20, max_depth=8, max_digits=30, name="TOML file", typical="a few dozen KiB",
                     nests=3, reading="the runs file")


@dataclass(frozen=True)
class Run:
    """One measured run of ``paper/runs.toml`` (see the file's header for every field)."""

    id: str
    title: str
    framework: str
    kind: str
    measured_bytes: int
    statistic: str
    rank: str
    gpus: int
    confidence: str
    confidence_why: str
    source: Mapping[str, str]
    model: str
    layout: Mapping[str, object]
    training: Mapping[str, object]
    gpu: Optional[str] = None
    notes: Tuple[str, ...] = ()
    flags: Mapping[str, object] = field(default_factory=dict)
    conventions: Optional[str] = None


def _err(where: str, message: str) -> ConfigError:
    return ConfigError("runs", f"{where}: {message}")


def _typed(where: str, key: str, value, kind) -> object:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise _err(where, f"{key} must be {'an integer' if kind is int else 'a ' + kind.__name__}, got {value!r}")
    if kind is int and value < 0:
        raise _err(where, f"{key} must not be negative, got {value}")
    return value


def _text(where: str, key: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(where, f"{key} must be a non-empty string, got {value!r}")
    return value


def _model(where: str, data, base: Path) -> str:
    if not isinstance(data, dict) or len(data) != 1 or not ({"config", "preset"} & set(data)):
        raise _err(where, "[model] must have exactly one of config (a config.json under paper/) or preset")
    if "preset" in data:
        name = _text(where, "model.preset", data["preset"])
        if name not in PRESETS:
            raise _err(where, f"model.preset {name!r} is not a preset: {', '.join(PRESETS)}")
        return name
    rel = _text(where, "model.config", data["config"])
    path = (base / rel).resolve()
    if not str(path).startswith(str(base.resolve())) or not path.is_file():
        raise _err(where, f"model.config {rel!r} is not a file under {base}")
    return str(path)


def _one(data, base: Path, index: int) -> Run:
    where = f"runs[{index}]"
    if not isinstance(data, dict):
        raise _err(where, "each [[runs]] entry must be a table")
    where = f"run {data.get('id', index)!r}" if isinstance(data.get("id"), str) else where
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise _err(where, f"missing {', '.join(missing)}")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise _err(where, f"unknown field {', '.join(unknown)}")
    for k in ("id", "title", "statistic", "confidence_why", "framework"):
        _text(where, k, data[k])
    if not _ID.fullmatch(data["id"]):
        raise _err(where, f"id must be lower-case letters, digits and '-', got {data['id']!r}")
    for k, choices in (("framework", FRAMEWORK_PRESETS), ("kind", KINDS), ("confidence", CONFIDENCE), ("rank", RANKS)):
        if not isinstance(data[k], str) or data[k] not in choices:
            raise _err(where, f"{k} must be one of {', '.join(choices)}, got {data[k]!r}")
    measured = _typed(where, "measured_bytes", data["measured_bytes"], int)
    if measured <= 0:
        raise _err(where, "measured_bytes must be positive")
    gpus = _typed(where, "gpus", data["gpus"], int)
    src = data["source"]
    if not isinstance(src, dict):
        raise _err(where, "[source] must be a table")
    lacking = [k for k in _SOURCE_REQUIRED if not isinstance(src.get(k), str) or not src[k].strip()]
    if lacking:
        raise _err(where, f"source lacks {', '.join(lacking)}")
    extra = sorted(set(src) - set(_SOURCE_REQUIRED) - set(_SOURCE_OPTIONAL))
    if extra:
        raise _err(where, f"unknown source field {', '.join(extra)}")
    layout, training = data["layout"], data["training"]
    for name, table, keys in (("layout", layout, LAYOUT_KEYS), ("training", training, TRAINING_KEYS)):
        if not isinstance(table, dict):
            raise _err(where, f"[{name}] must be a table")
        bad = sorted(set(table) - set(keys))
        if bad:
            raise _err(where, f"[{name}] has no option {', '.join(bad)} (memsym's: {', '.join(keys)})")
        for k, v in table.items():
            _typed(where, f"{name}.{k}", v, keys[k])
    for k in ("dp", "tp", "pp", "ep", "etp"):
        if k not in layout:
            raise _err(where, f"[layout] must give {k}")
    for k in ("mbs", "seq"):
        if k not in training:
            raise _err(where, f"[training] must give {k}")
    n_model = layout["dp"] * layout["tp"] * layout["pp"] * layout.get("cp", 1)
    if n_model != gpus:
        raise _err(where, f"gpus = {gpus} but DP x TP x PP x CP = {n_model}")
    if data["kind"] in ("oom", "fits") and "gpu" not in data:
        raise _err(where, f"an {data['kind']} run must name its gpu (its capacity)")
    if "gpu" in data:
        gpu_preset(_text(where, "gpu", data["gpu"]))
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _err(where, "notes must be a list of strings")
    flags = data.get("flags", {})
    if not isinstance(flags, dict):
        raise _err(where, "[flags] must be a table")
    conventions = data.get("conventions")
    if conventions is not None:
        _text(where, "conventions", conventions)
    return Run(data["id"], data["title"], data["framework"], data["kind"], measured, data["statistic"], data["rank"],
               gpus, data["confidence"], data["confidence_why"], dict(src), _model(where, data["model"], base),
               dict(layout), dict(training), data.get("gpu"), tuple(notes), dict(flags), conventions)


def load(path=None) -> List[Run]:
    """Every run of ``path`` (default ``paper/runs.toml``), checked; a problem raises
    ConfigError naming the run and the field.  Model files are resolved against ``paper/``
    (the folder of the default file), whichever file the runs come from."""
    path = Path(path) if path is not None else RUNS_FILE
    data = tomlfile.read(path, RUNS_BOUNDS, lambda p, _, message: ConfigError("runs", f"{p}: {message}"))
    if data.get("schema") != 1:
        raise ConfigError("runs", f"{path}: schema must be 1, got {data.get('schema')!r}")
    entries = data.get("runs")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("runs", f"{path}: no [[runs]] entries")
    runs = [_one(e, PAPER_DIR, i) for i, e in enumerate(entries)]
    seen = set()
    for r in runs:
        if r.id in seen:
            raise ConfigError("runs", f"{path}: run id {r.id!r} appears twice")
        seen.add(r.id)
    return runs


def select(runs: Sequence[Run], ids: Optional[Sequence[str]]) -> List[Run]:
    """The runs named by ``ids`` (all when None), in the file's order; an unknown id is an error."""
    if not ids:
        return list(runs)
    known = {r.id for r in runs}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ConfigError("runs", f"no run {unknown[0]!r} in the runs file; ids: {', '.join(sorted(known))}")
    return [r for r in runs if r.id in set(ids)]


def choose_preset(run: Run, available: Sequence[str], forced: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """(preset, note): the run's own ``conventions`` or ``forced`` if given, else the first
    preset of its framework that memsym has; the note says when that is a fallback."""
    if forced is not None:
        if forced not in available:
            raise ConfigError("conventions", f"unknown conventions preset {forced!r}{did_you_mean(forced, available)}: "
                                              f"{', '.join(available)}")
        return forced, None
    if run.conventions is not None:
        if run.conventions not in available:
            raise ConfigError("runs", f"run {run.id!r}: conventions {run.conventions!r} is not a preset: "
                                      f"{', '.join(available)}")
        return run.conventions, None
    wanted = FRAMEWORK_PRESETS[run.framework]
    for name in wanted:
        if name in available:
            if name != wanted[0]:
                return name, (f"fallback: {wanted[0]} (the {run.framework} preset) is not in this memsym; "
                              f"using {name} ({FRAMEWORK_WHY[run.framework]})")
            return name, None
    raise ConfigError("runs", f"run {run.id!r}: none of the presets {', '.join(wanted)} exists")


def estimate_options(run: Run, preset: str, presets: Mapping[str, Mapping[str, object]]) -> Dict[str, object]:
    """The ``memsym estimate`` keyword options that describe ``run`` under ``preset`` (the distributed optimizer as
    ``--bytes-per-param distributed``; MTP as ``--mtp-activations last-stage`` and ``--mtp`` unless ModelZoo's rank
    counts none: :func:`dropped`)."""
    opts: Dict[str, object] = {"model": run.model, "conventions": preset}
    for k, v in run.layout.items():
        opts[k] = tuple(v) if isinstance(v, list) else v
    for k, v in run.training.items():
        if k == "distributed_optimizer":
            if v:
                opts["bytes_per_param"] = "distributed"
            continue
        if k == "mtp" and v:  # a run that trains MTP: its activations, and its weights where the rank counts them
            opts["mtp_activations"] = "last-stage"
            if presets[preset].get("rank") == "modelzoo":
                continue
        opts[k] = tuple(v) if isinstance(v, list) else v
    return opts


def dropped(run: Run, preset: str, presets: Mapping[str, Mapping[str, object]]) -> List[str]:
    """The run's options that ``preset`` cannot take (said in the output)."""
    out = []
    if run.training.get("mtp") and presets[preset].get("rank") == "modelzoo":
        out.append(f"mtp: memsym runs counts the MTP modules' activations on the last stage "
                   f"(--mtp-activations last-stage); under {preset} not their weights (ModelZoo's rank counts none)")
    return out


def command_line(opts: Mapping[str, object], shown_model: str) -> str:
    """``memsym estimate ...`` for ``opts`` (what the prediction is, on one line)."""
    words = ["memsym", "estimate"]
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            words.append(flag)
        elif v is False or v is None:
            continue
        elif isinstance(v, (list, tuple)):
            words += [flag, ",".join(str(x) for x in v)]
        else:
            words += [flag, shown_model if k == "model" else str(v)]
    return " ".join(words) + " --all-stages"


def stage_index(run: Run, pp: int, worst: int) -> int:
    """The pipeline stage compared: the measured rank's (last: PP - 1; first: 0) or the most-loaded."""
    if run.rank == "last":
        return pp - 1
    if run.rank == "first":
        return 0
    return worst


def alloc_conf_of(run: Run) -> str:
    """The allocator settings a run's launcher exported: ``PYTORCH_ALLOC_CONF`` before its older name
    ``PYTORCH_CUDA_ALLOC_CONF``, the order PyTorch reads them in (c10/core/AllocatorConfig.cpp
    ``AcceleratorAllocatorConfig::instance``, from pytorch/pytorch#149601: the first set wins, the older name kept
    "for backwards compatibility")."""
    for env in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        if env in run.flags:
            return str(run.flags[env])
    return ""


def compare(run: Run, every: Sequence, worst: int, capacity: Optional[int] = None, judged: str = "device",
            dispatcher: Optional[str] = None, alloc_conf: Optional[str] = None) -> Dict[str, object]:
    """Predicted vs measured for ``run`` from every stage's estimate and the most-loaded one's index: exact bytes,
    the ratio and the compared stage's components; an oom or fits run judged by ``judged`` (allocator.KINDS)."""
    bound = run.kind in ("oom", "fits")  # judged against a capacity, at the most-loaded stage
    index = worst if bound else stage_index(run, len(every), worst)
    est = every[index]
    b, over = est.bytes, est.overheads
    if run.kind == "max_allocated":
        predicted, low, high = b["step_total"], b["step_total"], b["step_total"]
        compared = ("allocated total at the step's peak (model states + activations held at the peak + one "
                    "micro-batch's backward moment" + (" + runtime buffers" if "runtime" in b else "")
                    + "), no allocator overheads")
    else:
        conf = alloc_conf or alloc_conf_of(run)
        m = allocator.memory(est, conf, dispatcher, domain=gpu_preset(run.gpu).nvlink_domain if run.gpu else 8)
        kind = {"reserved": "reserved", "nvidia_smi": "device"}.get(run.kind, judged)
        predicted = low = high = m[kind] + (CONTEXT if run.kind == "nvidia_smi" else 0)  # nvidia-smi shows it
        compared = (f"the {kind} bytes (memsym estimate --memory {kind}"
                    + (f", PYTORCH_CUDA_ALLOC_CONF '{conf}'" if conf else "") + ")"
                    + ("" if run.kind not in ("oom", "fits") else " at the most-loaded stage against the capacity "
                       + ("exceeded" if run.kind == "oom" else "kept")))
    measured = run.measured_bytes
    ratio = Fraction(predicted) / measured
    out: Dict[str, object] = {
        "id": run.id, "title": run.title, "source": dict(run.source), "framework": run.framework,
        "kind": run.kind, "rank": run.rank, "gpus": run.gpus, "gpu": run.gpu, "confidence": run.confidence,
        "confidence_why": run.confidence_why, "statistic": run.statistic,
        "measured_bytes": measured, "predicted_bytes": predicted, "ratio": ratio,
        "predicted_range_bytes": [low, high], "compared": compared,
        "stage": index, "most_loaded_stage": worst,
        "components": {**{k: b.get(k, 0) for k in ("weights", "gradients", "optimizer", "activations", "runtime",
                                                   "graphs", "step", "activations_per_microbatch")},
                       "total": b["step_total"]},  # at the step's peak (derivations/assembly/step_terms.py)
        "step_moment": est.term_ids.get("step", ""),
        "peak_with_overheads": {"low": over["low"]["step_peak"], "high": over["high"]["step_peak"]},
        "inflight_microbatches": est.inflight,
        "notes": list(run.notes),
    }
    if not bound:
        out["within_band"] = BAND[0] <= ratio <= BAND[1]
    if bound:
        out["capacity_bytes"] = measured if capacity is None else capacity
        out["judged"] = kind
        out["exceeds"] = predicted > out["capacity_bytes"]
        out["exceeds_with_overheads"] = {"low": over["low"]["peak"] > out["capacity_bytes"],
                                         "high": over["high"]["peak"] > out["capacity_bytes"]}
    return out
