"""Options shared by the subcommands (model, layout, training) and output helpers."""
from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction

from derivations import config as cfg
from derivations.config import defaults, resolve as R

from .argtypes import (  # noqa: F401  (re-exported: the commands and tests name them as common.X)
    _shown, positive_int, nonneg_int, any_int, int_list, size_text, path_text, data_file, PATH_DESTS, SIZE_DESTS,
    apply_limits, dtype_bytes, recompute_policy, imbalance_factor, unit_fraction,
    layer_counts, offload_modules, cuda_graphs, HELP_ALL, help_all, explicit, checked_by)
from derivations.config.recipes import RECIPES
from symbolic.exact import fmt_gib


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
    for dest in ("efficiency", "gemm_efficiency", "nvlink_domain", "gpus_per_node"):  # estimate's, sensitivity's
        placed = dest in ("nvlink_domain", "gpus_per_node")  # also where --memory device puts the NCCL buffers
        if dest in typed and getattr(args, "time", True) is False and not (placed and memory == "device"):
            flag = "--" + dest.replace("_", "-")
            also = " or --memory device" if placed and hasattr(args, "memory") else ""
            raise cfg.ConfigError("time", f"{flag} acts on the step time{also} only: add --time{also} (or leave "
                                          f"{flag} out)")
    domain, node = getattr(args, "nvlink_domain", None), getattr(args, "gpus_per_node", None)
    if domain and node and domain < node:  # gpus.toml: an HGX node is one domain of 8, an NVL72 rack 72 of 4-GPU nodes
        raise cfg.ConfigError("nvlink-domain", f"--nvlink-domain {domain} is smaller than --gpus-per-node {node}: an "
                                               "NVLink domain joins at least one node's GPUs")
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


def add_model_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=cfg.DEFAULT_MODEL, action=_Explicit,
                   help=f"preset ({', '.join(cfg.PRESETS)}) or a Hugging Face config.json "
                        f"(default: {cfg.DEFAULT_MODEL}, the paper's model)")


def add_layout_options(p: argparse.ArgumentParser, stage: bool = True) -> None:
    """The parallel layout of Table 5 (defaults: the paper's reference layout)."""
    g = p.add_argument_group("parallel layout (defaults: the paper's Table 5)")
    E, L = _Explicit, cfg.Layout()  # the defaults are the Layout dataclass's (the paper's Table 5)
    for dest, what in (("dp", "data-parallel degree DP"), ("tp", "tensor-parallel degree TP"),
                       ("pp", "pipeline-parallel degree PP"), ("ep", "expert-parallel degree EP"),
                       ("etp", "tensor parallelism inside an expert ETP")):
        g.add_argument("--" + dest, type=positive_int, default=getattr(L, dest), action=E,
                       help=f"{what} (default {getattr(L, dest)})")
    g.add_argument("--cp", type=positive_int, default=L.cp, action=E,
                   help="context-parallel degree CP: each device holds s/CP of the sequence and, for eager "
                        f"attention, its s/CP query rows of the s^2 scores (default {L.cp})")
    g.add_argument("--sp", type=positive_int, default=L.sp, action=E,
                   help="sequence-parallel degree SP: TP (on, the default) or 1 (off)")
    g.add_argument("--gpus", type=positive_int, default=None, metavar="N", action=E,
                   help="GPUs of the job: DP = N / (TP PP CP) unless --dp is typed (then they must agree); with a "
                        "launch file, when the file does not say")
    g.add_argument("--layers-per-stage", type=int_list, default=L.layers_per_stage, metavar="N,N,...", action=E,
                   help="explicit pipeline split (default: the paper's, e.g. 4,...,4,1 for 61 layers at PP=16)")
    if stage:
        g.add_argument("--stage", type=nonneg_int, default=1, action=E,
                       help="pipeline stage to report (default 1, a 4-MoE-layer stage as in Tables 6, 8, 10; "
                            "with --schedule, the most-loaded stage)")


def add_cuda_graph_options(g, what: str = "") -> None:
    """--cuda-graphs and --cuda-graph-warmup-steps (estimate's; search's judge the rows it lists)."""
    E, D = _Explicit, cfg.Training()
    g.add_argument("--cuda-graphs", type=cuda_graphs, default=None, action=E, metavar="SCOPE,...",
                   help=help_all("Megatron-Core's CUDA graphs through Transformer Engine (--cuda-graph-impl "
                                 "transformer_engine --cuda-graph-modules): the captured part of each layer, attn, "
                                 "mlp, moe or layer (the whole layer): its saves move to the graphs' pool, the capture "
                                 "is a moment of the step (needs --conventions mcore or mcore-te)" + what))
    g.add_argument("--cuda-graph-warmup-steps", type=nonneg_int, default=D.graph_warmup, action=E, metavar="N",
                   help=help_all(f"steps run eagerly before the capture (Megatron's flag; default {D.graph_warmup}, "
                                 f"its default): 0 captures before the optimizer's first step, without Adam's moments"))


def add_training_options(p: argparse.ArgumentParser) -> None:
    E, T, D = _Explicit, _ExplicitTrue, cfg.Training()  # the defaults are the Training dataclass's
    g = p.add_argument_group("training (defaults: the paper's Tables 7 and 9)")
    g.add_argument("--recipe", choices=list(RECIPES), default=None,
                   help="preset of layout and choices: deepseek-v3 (the DeepSeek-V3 report's own training: PP16 "
                        "EP64 no TP, ZeRO-1 over 2048 GPUs, DualPipe, BF16 moments, FP32 master weights and "
                        "gradients, RMSNorm and MLA up-projection recomputation, FP8 activation caching, s 4096) "
                        "or paper (Tables 5, 7 and 9); options typed beside it override it")
    g.add_argument("--zero", type=int, choices=list(cfg.ZERO_NAMES), default=D.zero, action=E,
                   help=f"ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (default {D.zero})")
    g.add_argument("--recompute", type=recompute_policy, default=(D.recompute, tuple(D.recompute_ops)), action=E,
                   metavar="{none,full,selective,custom:OP,...}",
                   help="activation recomputation: none (default), full (keep the layer inputs and routing, "
                        "Sec. 5), selective (recompute the core attention: drop the b n_h s^2 tensors; Korthikanti "
                        "et al. 2022) or custom:OP,... recomputing the named operators, one of: "
                        + ", ".join(cfg.RECOMPUTE_OPS) + " (DeepSeek-V3 recomputes norm,mla_up)")
    g.add_argument("--offload-activations", type=offload_modules, default=None, action=E, metavar="MODULE,...",
                   help="Megatron-Core's fine-grained activation offloading (--fine-grained-activation-offloading "
                        "--offload-modules): the saved tensors of these modules (of at least 2^20 elements) go to host "
                        "memory between forward and backward, but for the rank's last layer of micro-batch 0; one of: "
                        + ", ".join(cfg.OFFLOAD_MODULES) + " (needs --conventions mcore or mcore-te)")
    add_cuda_graph_options(g)
    g.add_argument("--attention", choices=list(cfg.ATTENTION), default=D.attention, action=E,
                   help="attention kernel: eager (the paper's 5 b n_h s^2/TP score tensors) or flash (fused: no s^2 "
                        "tensor, FP32 log-sum-exp per row, 4 b n_h s/(TP CP) bytes per layer); default eager, or "
                        "flash once a run is named (--gpus, --global-batch, a launch file)")
    g.add_argument("--mbs", type=positive_int, default=D.mbs, action=E, help=f"micro-batch size b (default {D.mbs})")
    g.add_argument("--seq", type=positive_int, default=D.seq, action=E, help=f"sequence length s (default {D.seq})")
    g.add_argument("--imbalance", type=imbalance_factor, default=Fraction(D.imbalance), action=E, metavar="F",
                   help="routing imbalance F >= 1: the busiest expert rank gets F times the balanced tokens "
                        "(E_token = F b s N_r / (N CP); default 1, the paper's balanced routing)")
    g = p.add_argument_group("pipeline schedule (extension; default: the paper's one micro-batch per stage)")
    g.add_argument("--schedule", choices=list(cfg.SCHEDULES), default=D.schedule, action=E,
                   help="pipeline schedule: activations become what the stage holds at its peak, n_fl micro-batches "
                        "(1f1b and zb: min(m, PP - i); interleaved: Megatron's count with V chunks; dualpipe: PP + 1 "
                        "and two stages' parameters); --stage defaults to the most-loaded stage")
    g.add_argument("--microbatches", type=positive_int, default=D.microbatches, action=E, metavar="M",
                   help="micro-batches per step m (gradient-accumulation steps; default: enough to fill the pipeline)")
    g.add_argument("--vpp", type=positive_int, default=D.vpp, action=E, metavar="V",
                   help="virtual pipeline stages per device for --schedule interleaved (default 2)")
    g.add_argument("--virtual-layers", type=layer_counts, default=D.virtual_layers, action=E, metavar="N,N,...",
                   help="Megatron's --pipeline-model-parallel-layout as the layers of its PP x V virtual stages in "
                        "order (virtual stage j on rank j mod PP), e.g. Et*3|(tt|)*6tmL at PP 2, V 4 is "
                        "3,2,2,2,2,2,2,1; the peak is then the largest state of the rank's interleaved order "
                        "(default: each rank's layers in V equal chunks)")
    g = p.add_argument_group("precision (defaults: the paper's Table 7)")
    byts, names = dict(D.bytes), {}
    for name, n in cfg.DTYPES.items():
        names.setdefault(n, name)  # bf16 before fp16
    for opt, sym, what in (("--weight-dtype", "B_w", "weights"), ("--grad-dtype", "B_g", "gradients"),
                           ("--master-dtype", "B_m", "the optimizer's master weights"),
                           ("--optimizer-dtype", "B_1,B_2", "both Adam moments"),
                           ("--act-dtype", "B_a", "activations")):
        default = names[byts[sym.split(",")[0]]]
        g.add_argument(opt, type=dtype_bytes, default=None, action=E, metavar="{" + ",".join(cfg.DTYPES) + "}",
                       help=f"data type of {what}, bytes {sym} (default {default})")
    g.add_argument("--linear-recipe", choices=list(cfg.LINEAR_RECIPES), default=None, action=E,
                   help="Transformer Engine's low-precision recipe of the linear layers (Megatron's --fp8-recipe "
                        "delayed|tensorwise|blockwise|mxfp8, --fp4-recipe nvfp4): their saved inputs in the format "
                        "(1 B, + FP32 per 1x128 blockwise, + 1 B per 32 mxfp8; nvfp4 1/2 B + 1 B per 16) and TE's "
                        "cached quantized weight copies (both directions) on every device; needs --conventions "
                        "mcore-te; not with --fp8-activations (DeepSeek-V3's own caching)")
    g.add_argument("--quantized-param-gather", action=T, default=False,
                   help="the linear layers' weights are quantized parameters (Megatron's --fp8-param-gather, "
                        "--fp4-param-gather): no BF16 copy of them beside TE's quantized ones")
    g.add_argument("--fp8-activations", action=T, default=D.fp8,
                   help="cache in FP8 the activations the DeepSeek-V3 report names (Sec. 3.3): MoE up-projection "
                        "inputs and SwiGLU inputs (B_f8 = 1 B), the attention output before W^O in E5M6 (B_o = 1.5 B)")




def add_convention_options(p: argparse.ArgumentParser) -> None:
    """The modelling assumptions: a preset and one option per switch (CONVENTION_SWITCHES), the paper's by default."""
    shown = HELP_ALL[0]
    g = p.add_argument_group("conventions (modelling assumptions; defaults: the paper's; switches typed beside "
                             "--conventions override it)" + ("" if shown else
                             f"; the {len(cfg.CONVENTION_SWITCHES) + 2} switches, one per assumption, are listed by "
                             f"--help-all"))
    p.set_defaults(_conventions_preset=True)
    g.add_argument("--conventions", choices=list(cfg.CONVENTION_PRESETS), default=None,
                   help="set every switch to one source's assumptions: paper (default); modelzoo (NVIDIA "
                        "Megatron-MoE-ModelZoo's activation accounting: --routed-tokens dispatch --attention flash "
                        "--router-tensors sp --shared-expert tp --dropout-masks none --checkpoints one --swiglu fused "
                        "--expert-outputs kept --latent-norms kept --routing-state row-map --inventory modelzoo); "
                        "megatron (Megatron-LM's weight-and-optimizer estimate, --rank megatron --bytes-per-param "
                        "distributed, with the same runtime switches as modelzoo but the paper's tensor list, "
                        "--inventory paper; add --mtp to count the MTP layer). `memsym compare` itemises the gaps")
    g.add_argument("--framework", choices=("megatron", "megatron-fsdp", "torchtitan", "deepspeed"), default=None,
                   help="the framework whose ZeRO stages and schedules are run (derivations/config/"
                        "frameworks.py): search lists only those, estimate warns on another; default: the "
                        "conventions' framework (megatron for megatron, mcore, mcore-te, modelzoo), else none")
    g.add_argument("--kernels", choices=("local", "te"), default=None,
                   help=help_all("with --conventions mcore: local (Megatron-Core's local layer spec, what runs on "
                                 "CPU and what memsym trace --framework mcore measures: default) or te (Transformer "
                                 "Engine's fused RMSNorm, fused attention and fused RoPE, Megatron's fused SwiGLU: "
                                 "--norm-storage te --attention flash --softmax-dtype activation --causal-mask none "
                                 "--rope-tables shared --swiglu fused; read from the sources, not traced)"))
    for spec in cfg.CONVENTION_SWITCHES.values():
        g.add_argument(spec.option, dest=spec.name, choices=list(spec.values), default=spec.default, action=_Explicit,
                       help=help_all(spec.help + f" (default {spec.default})"))
    g.add_argument("--bytes-per-param", dest="bytes_per_param", choices=list(cfg.BYTES_CONVENTIONS), default="paper",
                   action=_Explicit, help=help_all(cfg.BYTES_HELP + " (default paper)"))
    g.add_argument("--mtp", action=_ExplicitTrue, default=False, help=help_all(cfg.MTP_HELP))


HBM_HELP = ("memory per GPU with its unit: GiB, MiB, TiB (binary) or GB, MB, TB (decimal), case-insensitive, e.g. "
            "80GiB or 141GB; a bare number is refused (the paper's tables write GiB as \"GB\"; sizes typed here "
            "mean what their unit says)")


def gpu_names() -> str:
    from derivations.config.gpus import presets
    return ", ".join(presets())


def add_budget_options(p: argparse.ArgumentParser, default_gpu: str = None, what: str = "") -> None:
    """--hbm SIZE and --gpu NAME (one of them): the memory budget of one device."""
    p.add_argument("--hbm", default=None, action=_Explicit, help=HBM_HELP + what)
    p.add_argument("--gpu", default=None, action=_Explicit, metavar="NAME",
                   help=f"a GPU preset instead of --hbm: {gpu_names()} (usable capacity and its source: "
                        "derivations/config/gpus.toml)" + (f"; default {default_gpu}" if default_gpu else ""))


def _alloc_conf(text: str) -> str:
    """--alloc-conf checked when it is read, as PyTorch checks PYTORCH_CUDA_ALLOC_CONF (allocator.settings)."""
    from derivations.analyses.allocator import settings
    try:
        settings(text)
    except cfg.ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_memory_options(p: argparse.ArgumentParser) -> None:
    """--memory KIND, --alloc-conf, --nccl-buffsize: which memory is judged (issue 46)."""
    p.add_argument("--memory", choices=("allocated", "reserved", "device"), default=None,
                   help="what is judged against the capacity: allocated (the terms), reserved (PyTorch's caching "
                        "allocator run over the step: derivations/analyses/allocator.py) or device (reserved + NCCL "
                        "and DeepEP buffers, inside or across the NVLink domain: derivations/assembly/"
                        "overheads_device.py); a GPU's capacity is its total less the CUDA context; default: the "
                        "paper's Sec. 6 ranges")
    p.add_argument("--alloc-conf", default="", metavar="CONF", type=_alloc_conf, action=_Explicit,
                   help=help_all("PYTORCH_CUDA_ALLOC_CONF for --memory (max_split_size_mb, expandable_segments, "
                        "garbage_collection_threshold)"))
    p.add_argument("--nccl-buffsize", type=positive_int, default=None, metavar="BYTES", action=_Explicit,
                   help=help_all("NCCL_BUFFSIZE for --memory device (default NCCL's 4 MiB)"))


def memory_of(args, est) -> dict:
    """--memory's bytes of one stage under the command's --alloc-conf, --dispatcher, --nccl-buffsize and NVLink domain
    (--nvlink-domain, else --gpus-per-node, else --gpu's, else 8)."""
    from derivations.analyses.allocator import memory
    from derivations.config.gpus import gpu
    domain = (getattr(args, "nvlink_domain", None) or getattr(args, "gpus_per_node", None)
              or (gpu(args.gpu).nvlink_domain if getattr(args, "gpu", None) else 8))
    return memory(est, getattr(args, "alloc_conf", ""), getattr(args, "dispatcher", None),
                  getattr(args, "nccl_buffsize", None), domain)


def memory_verdict(kind: str, judged: int, capacity: int, of: str) -> str:
    """One line: the ``kind`` of memory judged, against which capacity, and whether it fits."""
    return (f"{kind} {fmt_gib(judged)} GiB against {of} {fmt_gib(capacity)} GiB ({float(judged / capacity):.0%}): "
            f"{'fits' if judged <= capacity else 'DOES NOT FIT'}")


def budget_from_args(args, default_gpu: str = None, required: bool = False):
    """(bytes, GPU preset or None) of --hbm / --gpu, else of ``default_gpu``; None when not given nor required."""
    from derivations.config.gpus import budget
    hbm, gpu = budget(args.hbm, args.gpu)
    if hbm is None and default_gpu is not None:
        hbm, gpu = budget(None, default_gpu)
    if hbm is None and required:
        raise cfg.ConfigError("hbm", "give the memory per GPU: --hbm SIZE (e.g. 80GiB) or --gpu NAME "
                                     f"({gpu_names()})")
    return hbm, gpu


def add_json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def model_from_args(args) -> cfg.ModelSpec:
    """The model of ``--model`` (a preset or a config.json), or the ModelSpec the Python API set there."""
    return R.model_of(vars(args))


def layout_from_args(args) -> cfg.Layout:
    return R.layout_of(vars(args))


def training_from_args(args) -> cfg.Training:
    """The Training of the typed options (and, with --global-batch, m = G / (DP mbs) micro-batches)."""
    return R.training_with_batch(vars(args), explicit(args))


def stage_from_args(args):
    """The --stage typed, or None to let the estimate choose (stage 1; the most-loaded stage with a schedule)."""
    return R.stage_of(vars(args), explicit(args))


def recipe_assumptions(args):
    """The assumptions of the chosen --recipe that still hold (an option typed beside it drops its own)."""
    return list(R.recipe_assumptions(vars(args), explicit(args)))


def configuration(args) -> "R.Configuration":
    """What the parsed options stand for (derivations/config/resolve.py: resolve)."""
    return R.resolve(vars(args), explicit(args))


def json_default(o):
    if isinstance(o, Fraction):
        from symbolic.exact import as_number
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
