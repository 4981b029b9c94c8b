"""memsym runs: predicted vs measured for the training runs of ``paper/runs.toml``, each evaluated as ``memsym
estimate --all-stages`` evaluates its options and compared by kind (derivations/analyses/runs.py)."""
from __future__ import annotations

import os

from derivations import config as cfg
from derivations.analyses import runs as R
from derivations.assembly.device import estimate_all
from derivations.config import ConfigError
from derivations.config.gpus import gpu as gpu_preset
from symbolic.exact import fmt_gib, fmt_int
from symbolic.resources import PAPER_DIR

from . import common
from .keywords import namespace
from .launch import apply


def add_parser(sub):
    common.build(sub, "runs", run)


def _ids(text):
    if text is None:
        return None
    ids = [t.strip() for t in text.split(",")]
    if not all(ids):
        raise ConfigError("runs", f"--id expects comma-separated run ids, got {text!r}")
    return ids


def _shown_model(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


#: The option that reads a framework's original arguments, and their file's suffix under paper/runs/.
LAUNCH_READERS = {"megatron-core": ("from_megatron", ".yaml"), "torchtitan": ("from_torchtitan", ".toml")}


def launch_file(run):
    """(option, path) of the run's original arguments (``paper/runs/<id>.yaml`` or ``.toml``), or None."""
    if run.framework not in LAUNCH_READERS:
        return None
    option, suffix = LAUNCH_READERS[run.framework]
    path = PAPER_DIR / "runs" / f"{run.id}{suffix}"
    return (option, str(path)) if path.is_file() else None


def evaluate(runs, forced=None, judged="device"):
    """[(run, result dict)] for ``runs``: each evaluated under its preset and compared by kind."""
    available = list(cfg.CONVENTION_PRESETS)
    out = []
    for run in runs:
        preset, note = R.choose_preset(run, available, forced)
        launch = launch_file(run)
        arguments = launch and launch[1]
        if launch is not None:  # the run's original arguments, read as --from-megatron / --from-torchtitan read them
            opts = {launch[0]: arguments, "gpus": run.gpus, "conventions": preset}
        else:
            opts = R.estimate_options(run, preset, cfg.CONVENTION_PRESETS)
        try:  # the options of ``memsym estimate`` for the run, resolved as that command line resolves them
            ns = namespace("estimate", opts)
            if arguments is not None:
                apply(ns, quiet=True)
            c = common.configuration(ns)
            every, worst = estimate_all(c.model, c.layout, c.training, list(c.assumptions))
        except cfg.ConfigError as exc:
            raise cfg.ConfigError("runs", f"run {run.id!r} under --conventions {preset}: {exc}") from None
        capacity = gpu_preset(run.gpu).capacity if run.gpu else None
        res = R.compare(run, every, worst, capacity, judged, getattr(ns, "dispatcher", None),
                        getattr(ns, "alloc_conf", None))
        res["conventions"] = {"preset": preset, "wanted": R.FRAMEWORK_PRESETS[run.framework][0],
                              "fallback": note is not None, "note": note,
                              "dropped": R.dropped(run, preset, cfg.CONVENTION_PRESETS)}
        if arguments is not None:
            opts = {**opts, launch[0]: _shown_model(arguments)}
            res["launch"] = {"file": opts[launch[0]], "options": dict(ns._launch.options),
                             "not_modelled": list(ns._launch.unmodelled)}
        res["estimate_command"] = R.command_line(opts, _shown_model(run.model))
        res["assumptions"] = list(every[res["stage"]].assumptions)
        out.append((run, res))
    return out


def data(args) -> dict:
    """What ``memsym runs --json`` prints: {"runs": [...], "kinds": ..., "band": ...}."""
    runs = R.select(R.load(args.data), _ids(args.ids))
    return {"runs": [res for _, res in evaluate(runs, args.force_conventions, args.memory)],
            "kinds": dict(R.KINDS), "band": [R.BAND[0], R.BAND[1]]}


def run(args) -> int:
    out = data(args)
    if args.plot:
        from ..plots import predicted_vs_measured
        predicted_vs_measured([(r["id"], r["kind"], r["measured_bytes"], r["predicted_bytes"]) for r in out["runs"]],
                              args.plot, "memsym runs: predicted vs measured per GPU",
                              tuple(float(x) for x in out["band"]))
    if args.json:
        common.print_json(out)
        return 0
    print(render(out["runs"], args.verbose))
    if args.plot:
        print(f"\nplot: {args.plot}")
    return 0


#: What the measured column shows for a run that measured an event, not a number of bytes.
OBSERVED = {"oom": "OOM", "fits": "ran"}


def _verdict(r) -> str:
    if r["kind"] == "oom":
        return "exceeds" if r["exceeds"] else "FITS (no OOM)"
    if r["kind"] == "fits":
        return "EXCEEDS (ran)" if r["exceeds"] else "fits"
    return "in band" if r["within_band"] else "out of band"


def render(results, verbose=False) -> str:
    wid = max([len(r["id"]) for r in results] + [2])
    # the components table's rows: run, stage, in-flight micro-batches, then GiB columns
    row = lambda run, stage, fl, *gib: f"{run:<{wid}}  {stage:>5} {fl:>6}" + "".join(f" {x:>8}" for x in gib)
    head = (f"{'run':<{wid}}  {'kind':<13} {'conf':<6} {'measured':>10} {'predicted':>10} {'ratio':>6}  "
            f"{'verdict':<13} preset")
    lines = ["memsym runs: predicted vs measured per GPU (GiB = 2^30 bytes; ratio = predicted / measured; band "
             f"{float(R.BAND[0]):.2f}-{float(R.BAND[1]):.2f})", "", head, "-" * len(head)]
    for r in results:
        preset = r["conventions"]["preset"] + (" (fallback)" if r["conventions"]["fallback"] else "")
        bound = OBSERVED.get(r["kind"])  # an oom or fits run measured no bytes: its capacity is printed below
        measured, ratio = (bound, "-") if bound else (fmt_gib(r["measured_bytes"]), f"{float(r['ratio']):.2f}")
        lines.append(f"{r['id']:<{wid}}  {r['kind']:<13} {r['confidence']:<6} {measured:>10} "
                     f"{fmt_gib(r['predicted_bytes']):>10} {ratio:>6}  {_verdict(r):<13} {preset}")
    lines += ["", "components of the stage compared (GiB; activations = held at the end of the forward, in-flight "
                  "micro-batches; runtime with CUDA graphs' static buffers; +bwd = one micro-batch's backward moment "
                  "or the graphs' capture; total = at the step's peak):",
              row("run", "stage", "in fl.", "weights", "grads", "optim", "act", "runtime", "+bwd", "total", "+ovh lo",
                  "+ovh hi")]
    for r in results:
        c, fl, o = r["components"], r["inflight_microbatches"], r["peak_with_overheads"]
        lines.append(row(r["id"], r["stage"], "1" if fl is None else fmt_int(fl), *map(fmt_gib, (
            c["weights"], c["gradients"], c["optimizer"], c["activations"], c["runtime"] + c["graphs"], c["step"],
            c["total"], o["low"], o["high"]))))
    notes = sorted({r["conventions"]["note"] for r in results if r["conventions"]["note"]})
    dropped = sorted({d for r in results for d in r["conventions"]["dropped"]})
    if notes or dropped:
        lines += ["", "conventions:"] + [f"  - {n}" for n in notes + dropped]
    lines += [f"  {r['kind']} {r['id']}: {r['judged']} {fmt_gib(r['predicted_bytes'])} GiB against a capacity of "
              f"{fmt_gib(r['capacity_bytes'])} GiB: {'exceeds' if r['exceeds'] else 'does not exceed'}"
              for r in results if r["kind"] in ("oom", "fits")]
    if verbose:
        for r in results:
            s = r["source"]
            lines += ["", f"{r['id']}: {r['title']}",
                      f"  source: {s['repository']} @ {s['revision']}: {s['path']}",
                      f"  measured: {fmt_int(r['measured_bytes'])} bytes ({r['kind']}, rank {r['rank']}): "
                      f"{r['statistic']}",
                      f"  confidence {r['confidence']}: {r['confidence_why']}",
                      f"  preset {r['conventions']['preset']}: {R.FRAMEWORK_WHY.get(r['framework'], '')}",
                      f"  predicted: {fmt_int(r['predicted_bytes'])} bytes, stage {r['stage']}: {r['compared']}",
                      f"  as: {r['estimate_command']}"]
            lines += [f"  - {n}" for n in r["notes"]]
    else:
        lines += ["", "(--verbose: sources, the memsym estimate command of each run, and what each run enables that "
                      "memsym may not model)"]
    return "\n".join(lines)
