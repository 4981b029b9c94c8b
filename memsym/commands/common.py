"""Options shared by the subcommands (model, layout, training) and output helpers."""
from __future__ import annotations

import argparse
import functools
import json
import sys
from fractions import Fraction
from pathlib import Path

from derivations import config as cfg
from derivations.analyses import allocator
from derivations.config import defaults, gpus, resolve as R

from ..argtypes import (  # noqa: F401  (re-exported: the commands and tests name them as common.X)
    positive_int, nonneg_int, int_list, path_text, dtype_bytes, recompute_policy, imbalance_factor, capacity_factor,
    unit_fraction, layer_counts, offload_modules, cuda_graphs, HELP_ALL, help_all, explicit, checked_by)
from derivations.config.defaults import DEFAULT_GPU
from derivations.config.recipes import RECIPES
from symbolic import tomlfile
from symbolic.exact import as_number, fmt_gib

from . import COMMANDS


def check_conflicts(args) -> None:
    """Options that contradict each other, refused before any work (derivations/config/resolve.py)."""
    R.check_conflicts(vars(args), explicit(args))
    typed, memory = getattr(args, "_typed_before_launch", explicit(args)), getattr(args, "memory", None)
    for dest, flag, kinds in (("alloc_conf", "--alloc-conf", ("reserved", "device")),
                              ("nccl_buffsize", "--nccl-buffsize", ("device",))):
        if dest in typed and memory not in kinds:
            raise cfg.ConfigError("memory", f"{flag} changes only --memory {' or '.join(kinds)}: give --memory "
                                            f"{kinds[-1]} (or leave {flag} out)")
    if getattr(args, "cuda_graphs", None) and getattr(args, "command", None) in ("fit", "sensitivity", "report"):
        raise cfg.ConfigError("cuda-graphs", f"--cuda-graphs: the graphs' capture has no closed form in b and s for "
                                             f"{args.command}'s fits and derivatives: judge it with memsym estimate")
    if getattr(args, "cuda_graphs", None) and getattr(args, "command", None) == "search" and not memory:
        raise cfg.ConfigError("cuda-graphs", "search --cuda-graphs judges the rows it lists by estimate's terms with "
                                             "the graphs' capture (its ranking's vectorised terms have none): give "
                                             "--memory KIND")
    if "cuda_graph_warmup_steps" in typed and not getattr(args, "cuda_graphs", None):
        raise cfg.ConfigError("cuda-graphs", "--cuda-graph-warmup-steps says when --cuda-graphs are captured: give "
                                             "--cuda-graphs SCOPE (or leave it out)")
    timed = getattr(args, "time", hasattr(args, "overlap"))  # fit has no step time; search times every row
    for dest in ("efficiency", "gemm_efficiency", "nvlink_domain", "gpus_per_node"):  # estimate's, sensitivity's, fit's
        placed = dest in ("nvlink_domain", "gpus_per_node")  # also where --memory device puts the NCCL buffers
        if dest in typed and timed is False and not (placed and memory == "device"):
            flag = "--" + dest.replace("_", "-")
            acts = [w for w, on in (("the step time", hasattr(args, "time")),
                                    ("--memory device", placed and hasattr(args, "memory"))) if on]
            add = " or ".join(acts).replace("the step time", "--time")
            raise cfg.ConfigError("time", f"{flag} acts on {' or '.join(acts)} only: add {add} (or leave {flag} out)")
    domain, node = getattr(args, "nvlink_domain", None), getattr(args, "gpus_per_node", None)
    of = f"--gpus-per-node {node}" if node else "a node's 8 GPUs (the default --gpus-per-node)"
    if domain and domain < (node or 8):  # gpus.toml: an HGX node is one domain of 8, an NVL72 rack 72 of 4-GPU nodes
        raise cfg.ConfigError("nvlink-domain", f"--nvlink-domain {domain} is smaller than {of}: an NVLink domain "
                                               "joins at least one node's GPUs")
    gpus = getattr(args, "gpus", None)
    if node and gpus and gpus > node and gpus % node:
        raise cfg.ConfigError("gpus-per-node", f"--gpus {gpus} is not a whole number of nodes of --gpus-per-node "
                                               f"{node}")
    if memory and getattr(args, "tensors", False):
        raise cfg.ConfigError("memory", "--memory judges a stage's step, --tensors lists one layer's tensors: give "
                                        "one of them")


class _Explicit(argparse.Action):
    """``store`` that remembers the option was typed (``namespace._explicit``): no preset overrides it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        explicit(namespace).add(self.dest)


class _ExplicitTrue(_Explicit):
    def __init__(self, option_strings, dest, default=False, required=False, help=None):
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, True, option_string)


def finish(args) -> None:
    """After parsing (command line, API): a launch file's options under the typed ones, every option resolved
    (typed > recipe > conventions preset > default: resolve.resolved), contradictions refused."""
    if hasattr(args, "from_megatron"):
        from .launch import apply
        apply(args)
    for dest, value in R.resolved(vars(args), explicit(args)).items():
        setattr(args, dest, value)
    check_conflicts(args)


def gpu_names() -> str:
    return ", ".join(gpus.presets())


def _alloc_conf(text: str) -> str:
    """--alloc-conf checked when it is read, as PyTorch checks PYTORCH_CUDA_ALLOC_CONF (allocator.settings)."""
    try:
        allocator.settings(text)
    except cfg.ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


#: The readers an option's ``type`` names in options.toml (argtypes.py; apply_limits bounds them by dest).
TYPES = {"positive_int": positive_int, "nonneg_int": nonneg_int, "int": int, "int_list": int_list,
         "layer_counts": layer_counts, "path_text": path_text, "recompute": recompute_policy,
         "offload": offload_modules, "cuda_graphs": cuda_graphs, "imbalance_factor": imbalance_factor,
         "capacity_factor": capacity_factor, "unit_fraction": unit_fraction, "alloc_conf": _alloc_conf}
ACTIONS = {"typed": _Explicit, "typed-flag": _ExplicitTrue, "flag": "store_true", "append": "append",
           "extend": "extend"}
#: What options.toml names by "=X" or "{X}" beyond a command's own values and the fields of Layout and Training.
COMPUTED = {
    "default_model": lambda: cfg.DEFAULT_MODEL, "presets": lambda: ", ".join(cfg.PRESETS),
    "recompute_default": lambda: (cfg.Training().recompute, tuple(cfg.Training().recompute_ops)),
    "recompute_label": lambda: cfg.Training().recompute_label, "recompute_ops": lambda: ", ".join(cfg.RECOMPUTE_OPS),
    "offload_modules": lambda: ", ".join(cfg.OFFLOAD_MODULES), "imbalance": lambda: Fraction(cfg.Training().imbalance),
    "gpu_names": gpu_names, "default_gpu": lambda: DEFAULT_GPU,
    "bytes_help": lambda: cfg.BYTES_HELP, "mtp_help": lambda: cfg.MTP_HELP, "RECIPES": lambda: list(RECIPES),
    "other_presets": lambda: ", ".join(n for n in cfg.CONVENTION_PRESETS if n not in ("paper", "megatron", "modelzoo")),
    "switches_brief": lambda: "" if HELP_ALL[0] else (f"; the {len(cfg.CONVENTION_SWITCHES) + 2} switches, one per "
                                                      "assumption, are listed by --help-all"),
    **{name: (lambda name=name: list(getattr(cfg, name))) for name in
       ("ZERO_NAMES", "ATTENTION", "SCHEDULES", "LINEAR_RECIPES", "CONVENTION_PRESETS")}}


class _Values(dict):
    """A command's values for options.toml's "=X" and "{X}": its own, else COMPUTED's, else the field of Layout or
    Training ("Training.mbs": the paper's defaults), computed when first named."""

    def __missing__(self, key):
        cls, _, field = key.partition(".")
        self[key] = COMPUTED[key]() if key in COMPUTED else getattr({"Layout": cfg.Layout,
                                                                     "Training": cfg.Training}[cls](), field)
        return self[key]


OPTIONS = Path(__file__).with_name("options.toml")


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    with tomlfile.package_data(OPTIONS) as data:
        return {key: data[key] for key in ("groups", "sets", "commands", "options")}


def _option(command: str, name: str) -> dict:
    """options.toml's definition of ``name`` for ``command``: its own variant, else the shared one (``base``: another
    option's definition under the variant's keys, ``more`` appended to its help)."""
    options = _table()["options"]
    spec = dict(options.get(f"{command}.{name}") or options[name])
    if "base" in spec:
        base, more = options[spec.pop("base")], spec.pop("more", "")
        spec = {**base, **spec, "help": spec.get("help", base["help"]) + more}
    return spec


def _add(g, command: str, name: str, values: _Values) -> None:
    """One option of ``command`` on the group ``g``, as options.toml defines it."""
    spec = _option(command, name)
    text, every, flag = spec.pop("help", None), spec.pop("all", False), spec.pop("flag", None)
    kw = {k: values[v[1:]] if isinstance(v, str) and v.startswith("=") else v for k, v in spec.items()}
    if isinstance(kw.get("default"), list):  # a copy: the table is read once
        kw["default"] = (list if kw.get("action") in ("append", "extend") else tuple)(kw["default"])
    if "type" in kw:
        kw["type"] = TYPES.get(kw["type"]) or values[kw["type"]]
    if "action" in kw:
        kw["action"] = ACTIONS[kw["action"]]
    if text is not None:
        text = text.format_map(values)
        kw["help"] = help_all(text) if every else text
    if kw.pop("positional", False):
        g.add_argument(name, **kw)
    else:
        g.add_argument(flag or "--" + name.replace("_", "-"), dest=name, **kw)


def _dtypes(p, g, values) -> None:
    """--weight-dtype ... --act-dtype: the bytes of Table 7 (defaults the paper's)."""
    byts, names = dict(cfg.Training().bytes), {}
    for name, n in cfg.DTYPES.items():
        names.setdefault(n, name)  # bf16 before fp16
    for opt, sym, what in (("--weight-dtype", "B_w", "weights"), ("--grad-dtype", "B_g", "gradients"),
                           ("--master-dtype", "B_m", "the optimizer's master weights"),
                           ("--optimizer-dtype", "B_1,B_2", "both Adam moments"),
                           ("--act-dtype", "B_a", "activations")):
        default = names[byts[sym.split(",")[0]]]
        g.add_argument(opt, type=dtype_bytes, default=None, action=_Explicit, metavar="{" + ",".join(cfg.DTYPES) + "}",
                       help=f"data type of {what}, bytes {sym} (default {default})")


def _switches(p, g, values) -> None:
    """One option per modelling assumption (derivations/config/switches.toml), the paper's by default."""
    p.set_defaults(_conventions_preset=True)
    for spec in cfg.CONVENTION_SWITCHES.values():
        g.add_argument(spec.option, dest=spec.name, choices=list(spec.values), default=spec.default, action=_Explicit,
                       help=help_all(spec.help + f" (default {spec.default})"))


HOOKS = {"dtypes": _dtypes, "switches": _switches}


def build(sub, command: str, run, **values) -> argparse.ArgumentParser:
    """``command``'s parser as options.toml lists its options, running ``run``; ``values``: what its "=X" and "{X}"
    name beyond COMPUTED."""
    values = _Values(values)
    with tomlfile.damaged(OPTIONS):  # a damaged options.toml: one line, never a traceback
        table = _table()
        spec = table["commands"][command]
        p = sub.add_parser(command, help=COMMANDS[command], description=spec["description"].format_map(values),
                           epilog=spec.get("epilog"), formatter_class=argparse.RawDescriptionHelpFormatter
                           if spec.get("raw") else argparse.HelpFormatter)
        items, g = list(spec["options"]), p
        while items:
            item = items.pop(0)
            if item.startswith("*"):
                items[:0] = table["sets"][item[1:]]
            elif item == "[one-of]":
                g = p.add_mutually_exclusive_group()
            elif item.startswith("["):
                g = p.add_argument_group(table["groups"][item[1:-1]].format_map(values))
            elif item.startswith("@"):
                HOOKS[item[1:]](p, g, values)
            else:
                _add(g, command, item, values)
    p.set_defaults(run=run)
    return p


def memory_of(args, est) -> dict:
    """--memory's bytes of one stage under the command's --alloc-conf, --dispatcher, --nccl-buffsize and NVLink domain
    (--nvlink-domain, else --gpus-per-node, else --gpu's, else 8)."""
    domain = (getattr(args, "nvlink_domain", None) or getattr(args, "gpus_per_node", None)
              or (gpus.gpu(args.gpu).nvlink_domain if getattr(args, "gpu", None) else 8))
    return allocator.memory(est, getattr(args, "alloc_conf", ""), getattr(args, "dispatcher", None),
                  getattr(args, "nccl_buffsize", None), domain)


def routing_judged(imbalance) -> list:
    """fit's and search's line under a routing skew (none at balanced routing): every verdict at its upper end F."""
    if imbalance == 1:
        return []
    return [f"routing: judged at the upper end of the skew, F = {float(imbalance):g} (the worst EP rank's routed "
            f"tokens; balanced routing, F = 1, needs less)"]


def memory_verdict(kind: str, judged: int, capacity: int, of: str) -> str:
    """One line: the ``kind`` of memory judged, against which capacity, and whether it fits."""
    return (f"{kind} {fmt_gib(judged)} GiB against {of} {fmt_gib(capacity)} GiB ({float(judged / capacity):.0%}): "
            f"{'fits' if judged <= capacity else 'DOES NOT FIT'}")


def memory_json(args, est):
    """--memory KIND of the stage ``est`` (what ``estimate --memory`` prints; derivations/analyses/allocator.py
    memory): allocated, reserved, each buffer, the graphs' pool, device; judged against --hbm or --gpu when one is
    given. None without --memory."""
    if not getattr(args, "memory", None):
        return None
    m = memory_of(args, est)
    hbm, gpu = budget_from_args(args)
    out = {"judged": args.memory, "allocated": m["allocated"], "reserved": m["reserved"],
           "buffers": [{"term": b.term, "what": b.what, "bytes": b.bytes} for b in m["buffers"]],
           "cuda_graph_pool": m["graph_pool"], "device": m["device"], "alloc_conf": m["alloc_conf"],
           "terms_total": est.bytes["step_total"]}
    if hbm is not None:
        out.update(capacity=hbm, capacity_of=gpu.name if gpu else "--hbm", fits=m[args.memory] <= hbm,
                   gpu_total=gpu.total if gpu else hbm + gpus.CONTEXT)
    return out


def memory_lines(m, stage: int) -> list:
    """The text of :func:`memory_json`'s ``m`` at ``stage`` (none without --memory)."""
    if not m:
        return []
    lines = ["", f"memory of the step (--memory {m['judged']}: the {m['judged']} bytes are judged), stage {stage}:",
             f"  allocated  {fmt_gib(m['allocated']):>9} GiB  the caching allocator's peak over the step (the terms at "
             f"the step's peak: {fmt_gib(m['terms_total'])} GiB)",
             f"  reserved   {fmt_gib(m['reserved']):>9} GiB  PyTorch's caching allocator run over the step "
             f"(PYTORCH_CUDA_ALLOC_CONF '{m['alloc_conf']}')"]
    lines += ([f"    {'of which the CUDA graphs private pool':<44} {fmt_gib(m['cuda_graph_pool']):>9} GiB  graph.pool"]
              if m["cuda_graph_pool"] else [])
    lines += [f"  + {b['what']:<44} {fmt_gib(b['bytes']):>9} GiB  {b['term']}" for b in m["buffers"]]
    lines += [f"  device     {fmt_gib(m['device']):>9} GiB"]
    if "capacity" in m:
        lines.append("  " + memory_verdict(m["judged"], m[m["judged"]], m["capacity"], m["capacity_of"]))
        total = "--hbm" if m["capacity_of"] == "--hbm" else "cudaMemGetInfo's total"
        lines.append(f"  (usable: {total} {fmt_gib(m['gpu_total'])} GiB less the CUDA context "
                     f"{fmt_gib(m['gpu_total'] - m['capacity'])} GiB, derivations/config/gpus.toml)")
    if not m.get("fits", True):  # the Sec. 6 verdict's search, one allocator run per candidate, is not made
        lines.append(f"  no cheapest change judged by the {m['judged']} bytes (one allocator run per change): "
                     f"memsym fit or search --memory {m['judged']} answers it")
    return lines


def budget_from_args(args, default_gpu: str = None, required: bool = False):
    """(bytes, GPU preset or None) of --hbm / --gpu, else of ``default_gpu``; None when not given nor required.
    Under --memory, --hbm is a device's total as --gpu's is: the CUDA context (gpus.py CONTEXT) is taken off it."""
    hbm, gpu = gpus.budget(getattr(args, "hbm", None), getattr(args, "gpu", None))
    if hbm is not None and gpu is None and getattr(args, "memory", None):
        if hbm <= gpus.CONTEXT:
            raise cfg.ConfigError("hbm", f"--hbm {args.hbm} under --memory: a device's total must exceed the CUDA "
                                         f"context, {gpus.CONTEXT:,} bytes (derivations/config/gpus.py CONTEXT)")
        hbm -= gpus.CONTEXT
    if hbm is None and default_gpu is not None:
        hbm, gpu = gpus.budget(None, default_gpu)
    if hbm is None and required:
        raise cfg.ConfigError("hbm", "give the memory per GPU: --hbm SIZE (e.g. 80GiB) or --gpu NAME "
                                     f"({gpu_names()})")
    return hbm, gpu


def model_from_args(args) -> cfg.ModelSpec:
    """The model of ``--model`` (a preset or a config.json), or the ModelSpec the Python API set there."""
    return R.model_of(vars(args))


def configuration(args) -> "R.Configuration":
    """What the parsed options stand for (derivations/config/resolve.py: resolve): model, layout, training (with
    --global-batch, m = G / (DP mbs) micro-batches), the --stage typed (None: the estimate chooses) and the --recipe's
    assumptions that still hold."""
    return R.resolve(vars(args), explicit(args))


def json_default(o):
    if isinstance(o, Fraction):
        return as_number(o)
    if isinstance(o, range):
        return [o.start, o.stop - 1]
    raise TypeError(f"cannot serialise {type(o).__name__}")


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=json_default)
    sys.stdout.write("\n")


def defaults_used(args) -> dict:
    """{"defaults": ...}: what the view's defaults set (derivations/config/defaults.py), for --json; or {}."""
    info = getattr(args, R.DEFAULTS, None)
    return {"defaults": info} if info else {}


def print_defaults(args, stream=None, prefix: str = "") -> None:
    """The one line of the defaults a command used (if any), on ``stream`` (default stdout), after ``prefix``."""
    text = defaults.line(getattr(args, R.DEFAULTS, None))
    if text:
        print(prefix + text, file=stream or sys.stdout)
