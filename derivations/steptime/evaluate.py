"""The step-time model evaluated without sympy: its printed functions (``derivations/generated/deepseek_time.py``)
at arrays of configurations (:func:`parts`), the inputs named in :mod:`derivations.steptime.model`."""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Dict, Mapping, Optional

import numpy as np

from derivations import config as cfg
from derivations import evaluate as ev
from derivations import families
from derivations.config import gpus as gpu_presets
from derivations.config.defaults import DEFAULT_GPU
from derivations.generated import deepseek_time
from derivations.steptime import efficiency as published
from derivations.steptime import placement
from numpy import maximum, select

# without --gpu, a recipe the default (Hopper) has no rate for (MXFP8, NVFP4) is timed on the first GPU running it
RECIPE_DEFAULT_GPU = "b200"
OVERLAPS = ("none", "megatron", "ideal")
#: Megatron's overlap switches (``--overlap megatron:SWITCH,...``; model.py exposed) and their inputs: Megatron-LM's
#: --overlap-grad-reduce, --overlap-param-gather (the default two), --overlap-moe-expert-parallel-comm,
#: --tp-comm-overlap (TE userbuffers), --delay-wgrad-compute.
OVERLAP_SWITCHES = {"grad-reduce": "o_GR", "param-gather": "o_PG", "ep": "o_EP", "tp": "o_TP", "wgrad": "o_DW"}
MEGATRON_DEFAULT = ("grad-reduce", "param-gather")
#: ``efficiency`` that reads the published benchmarks (derivations/steptime/efficiency.py) instead of one number
PUBLISHED = "published"
#: the parts :func:`parts` returns, in the order they are printed
PARTS = ("compute", "memory", "recompute", "TP", "EP", "CP", "PP", "DP", "bubble", "optimizer", "microbatch", "step")


#: the step-time model's per-layer parameter inputs and the terms they are (derivations/steptime/model.py)
PARAMETER_TERMS = (("P_A", "params.mla"), ("P_F", "params.dense_ffn"), ("P_E", "params.expert"),
                   ("P_R", "params.router"), ("P_H", "params.head"))
#: the device's parameters of a stage, non-MoE and MoE, and their terms
DEVICE_TERMS = (("P_n", "static.device.non_moe"), ("P_m", "static.device.moe"))


class TimeError(cfg.ConfigError):
    pass


#: the families the model times: DeepSeek-V2/V3 (MLA + MoE; Kimi K2, V3.2 and GLM-5 configs read as it) and
#: DeepSeek-V4 (its attention's keys per query and compressors: :func:`_v4_attention`)
FAMILIES = ("deepseek", "deepseek_v4")
#: the precision each linear recipe (Transformer Engine's, --linear-recipe) runs its GEMMs at: the gpus.toml rate
RECIPE_RATES = {None: "bf16", "delayed": "fp8", "tensorwise": "fp8", "blockwise": "fp8", "mxfp8": "mxfp8",
                "nvfp4": "nvfp4"}
#: bytes per element a recipe's quantized copy of a tensor takes, its scales included (TE: FP8 1 byte and one FP32
#: scale per tensor; MXFP8 one E8M0 scale per 32 elements; NVFP4 half a byte, one E4M3 scale per 16 elements)
RECIPE_BYTES = {"delayed": 1, "tensorwise": 1, "blockwise": 1 + Fraction(4, 128), "mxfp8": 1 + Fraction(1, 32),
                "nvfp4": Fraction(1, 2) + Fraction(1, 16)}
#: DeepSeek-V3's FP8 dispatch (report Sec. 3.3.2): 1 byte and a 4-byte scale per 128 elements; combine in BF16
FP8_DISPATCH_BYTES = 1 + Fraction(4, 128)


def check(model: cfg.ModelSpec, gpu=None, overlap: str = "megatron", efficiency=1, training=None) -> "gpu_presets.GPU":
    """The GPU preset whose rates the model uses (``gpu``: a preset, a name or None for the default), after
    checking the model and options it can time (and, with ``training``, that the GPU has its recipe's rate)."""
    if model.family not in FAMILIES:
        raise TimeError("time", f"the step-time model covers the DeepSeek family (MLA and MoE) and DeepSeek-V4; "
                                f"{model.name} is {families.get(model.family).title}")
    switches(overlap)
    if efficiency != PUBLISHED and (isinstance(efficiency, bool) or not isinstance(efficiency, (int, float, Fraction))
                                    or not 0 < efficiency <= 1):
        raise TimeError("gemm-efficiency", f"--gemm-efficiency must be in (0, 1], got {efficiency!r}")
    rate = RECIPE_RATES[getattr(training, "linear_recipe", None)]
    default = DEFAULT_GPU if gpu_presets.gpu(DEFAULT_GPU).rate(rate) is not None else RECIPE_DEFAULT_GPU
    g = gpu_presets.gpu(gpu or default) if not isinstance(gpu, gpu_presets.GPU) else gpu
    if g.rate("bf16") is None:
        raise TimeError("gpu", f"{g.name} has no published rates in derivations/config/gpus.toml")
    if g.rate(rate) is None:
        raise TimeError("linear-recipe", f"--linear-recipe {training.linear_recipe}: {g.name} has no {rate.upper()} "
                                         f"rate (derivations/config/gpus.toml: no such tensor-core instructions)")
    return g


#: the model's dimensions and bytes per element the step-time model reads, exact values as floats
DIMENSIONS = ("h", "n_h", "d_h", "d_hr", "d_v", "N_r", "N_s", "F", "B_a", "B_w", "B_g", "B_m", "B_1", "B_2")
#: the widths the memory-bound operations read (model.py MEMORY_OPS; 0 where the model has none: no query
#: compression, V4's attention without MLA's key-value latent)
WIDTHS = ("d_cq", "d_c", "h_F", "N", "h_E", "v")
#: the parameter terms read beside PARAMETER_TERMS, 0 where absent: V4's hyper-connections and compressors, DSA's
#: lightning indexers
EXTRA_TERMS = ("params.hc", "params.compressor.csa", "params.compressor.hca", "params.indexer")


@lru_cache(maxsize=32)
def _model_constants(model: cfg.ModelSpec, training: cfg.Training) -> Dict[str, float]:
    """The model's dimensions, bytes per element and per-layer parameter counts (params.* terms, exact), and what
    :func:`constants` computes of them."""
    fam = families.get(model.family)
    values = cfg.named(model, None, training)
    terms = ev.Terms(model.structure, ev.derived(values, fam.name), fam.name)
    if fam.name == "deepseek_v4":  # one shared key-value head of d_a (its rotary part d_hr) for keys and values
        values = {**values, "d_h": values["d_a"] - values["d_hr"], "d_v": values["d_a"]}
    v = {k: float(x) for k, x in values.items() if isinstance(x, (int, Fraction))}
    p = {name: float(terms.term(tid)) if tid in terms else 0.0
         for name, tid in PARAMETER_TERMS + tuple((t, t) for t in EXTRA_TERMS)}
    recipe = training.linear_recipe if training is not None else None
    fp8 = training is not None and training.fp8
    # the D MTP modules (on the head's stage when trained)
    mtp = model.mtp_layers * (getattr(training.conventions, "mtp_activations", "none") != "none") if training else 0
    k = constants(v, p, fam.name == "deepseek_v4", float(RECIPE_BYTES[recipe]) if recipe else 0.0,
                  float(FP8_DISPATCH_BYTES) if fp8 else 0.0, mtp)
    return {**{n: v[n] for n in DIMENSIONS}, **p, **k, **{n: v.get(n, 0.0) for n in WIDTHS},
            "Phi_rate": RECIPE_RATES[recipe],
            "P_U": _recomputed(fam.name, v, p, training.recompute_ops if training is not None else ())}


def constants(v, p, v4, recipe_bytes, dispatch_bytes, mtp):
    """{'P_A', 'B_EP', 'X_A', 'X_F', 'X_M', 'D_M', 'P_M'} of the model's values ``v`` and parameter counts ``p``
    (PARAMETER_TERMS, EXTRA_TERMS; floats): the attention's parameters with V4's hyper-connections; the experts'
    dispatch bytes (``dispatch_bytes``: DeepSeek-V3's FP8 dispatch, 0 without, the combine in B_a); the linear layers'
    input widths per token times the bytes each is cast to once per forward under a low-precision recipe
    (``recipe_bytes``, 0 without); ``mtp`` MTP modules (eh_proj, 2h x h, one MoE layer and the shared head again).
    One definition: the command line calls it, the page prints it (memsym/page/search.py)."""
    p_a = p["P_A"] + p["params.hc"]
    x_att = v["h"] + v["d_cq"] + v["n_h"] * v["d_a"] + v["g_O"] * v["d_O"] if v4 else \
        v["h"] + v.get("d_cq", 0) + v["d_c"] + v["n_h"] * v["d_v"]  # V2-Lite: no query compression
    x_ffn = 0.0 if v4 else v["h"] + v["h_F"]
    # the MoE input once (the shared experts'), and each routed copy again where it arrives in BF16: a grouped GEMM
    # of the recipe casts the tokens it received (Transformer Engine GroupedLinear split_quantize of the permuted
    # tokens, Megatron-Core's dispatchers sending BF16: deepseek-v3-gb200-optimization@eb0783b Sec. 1 item 1 and
    # 2.1.3); DeepSeek's FP8 dispatch casts a token once, before it is sent (report Sec. 3.3.2)
    routed_in = 0.0 if dispatch_bytes else v["F"] * v["N_r"] * v["h"]
    x_moe = v["h"] + routed_in + (v["F"] * v["N_r"] + v["N_s"]) * v["h_E"]
    cast = v["B_a"] + recipe_bytes if recipe_bytes else 0.0
    return {"P_A": p_a, "B_EP": (dispatch_bytes + v["B_a"]) / 2 if dispatch_bytes else v["B_a"],
            "X_A": cast * x_att, "X_F": cast * x_ffn, "X_M": cast * x_moe, "D_M": mtp,
            "P_M": 2 * v["h"] ** 2 + p_a + p["P_R"] + v["F"] * (v["N_r"] + v["N_s"]) * p["P_E"] + p["P_H"]}


def _recomputed(family: str, v: Dict[str, float], p: Dict[str, float], ops) -> Dict[str, float]:
    """{'A', 'F', 'M'}: parameters per token whose matrix products the custom recomputation ``ops`` re-runs per
    attention, dense-FFN and MoE layer (latent, mla_up: MLA's projections; router, experts, shared; ffn: two thirds
    of the dense FFN); score is rho_sel's, norm, mask and swiglu re-run no matrix product."""
    ops = set(ops or ())
    if family != "deepseek" and ops & {"latent", "mla_up"}:
        raise TimeError("time", "--time: the recomputation of MLA's projections (latent, mla_up) is the DeepSeek-V2/V3 "
                                "family's; this model has no MLA")
    att = 0.0
    if "latent" in ops:
        att += v["h"] * (v.get("d_cq", 0) + v["d_c"] + v["d_hr"])
    if "mla_up" in ops:
        att += v["n_h"] * (v.get("d_cq", v["h"]) * (v["d_h"] + v["d_hr"]) + v["d_c"] * (v["d_h"] + v["d_v"]))
    moe = ("router" in ops) * p["P_R"] + ("experts" in ops) * v["F"] * v["N_r"] * p["P_E"] \
        + ("shared" in ops) * v["N_s"] * p["P_E"]
    return {"A": att, "F": ("ffn" in ops) * 2 / 3 * p["P_F"], "M": moe}


@lru_cache(maxsize=4096)
def _device_coefficients(model: cfg.ModelSpec, tp: int, ep: int, etp: int) -> Dict[str, tuple]:
    """{'P_n', 'P_m'}: (coefficient of each composition count) of the device's non-MoE and MoE parameters
    (static.device.non_moe and static.device.moe are linear in the counts: each count alone, exact), each
    computed once per value of the degrees its term reads (:func:`_degrees_read`)."""
    out = {}
    for name, tid in DEVICE_TERMS:
        read = _degrees_read(model, tid)
        out[name] = _term_coefficients(model, tid, *(x if k in read else 1 for k, x in
                                                     (("tp", tp), ("ep", ep), ("etp", etp))))
    return out


@lru_cache(maxsize=64)
def _degrees_read(model: cfg.ModelSpec, tid: str) -> frozenset:
    """Which of tp (the symbols TP and SP = TP), ep (EP) and etp (ETP) term ``tid`` reads: all three when it reads
    a derived symbol (EDP, ...: :func:`derivations.evaluate.derived`), whose inputs are not told apart here.  The
    substitution's other symbols are the same at every (tp, ep, etp)."""
    read = set(ev.reads(model.structure, tid, model.family))
    given = set(cfg.named(model, cfg.Layout(), None)) | set(cfg.composition_names(model.family))
    if read - given:
        return frozenset(("tp", "ep", "etp"))
    return frozenset(k for k, syms in (("tp", {"TP", "SP"}), ("ep", {"EP"}), ("etp", {"ETP"})) if read & syms)


@lru_cache(maxsize=4096)
def _term_coefficients(model: cfg.ModelSpec, tid: str, tp: int, ep: int, etp: int) -> tuple:
    """(coefficient of each composition count) of term ``tid`` (linear in the counts) at the degrees, exact then
    converted to float64.  The derived symbols are computed once, before the counts are set: a derived symbol
    reading a count would be missing, and the term raise MissingSymbol, rather than take another count's."""
    fam = families.get(model.family)
    names = cfg.composition_names(model.family)
    base = ev.derived(cfg.named(model, cfg.Layout(tp=tp, ep=ep, etp=etp, sp=tp), None), fam.name)
    return tuple(float(ev.Terms(model.structure, {**base, **{n: int(n == c) for n in names}}, fam.name).term(tid))
                 for c in names)


def device_params(model: cfg.ModelSpec, rows: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{'P_n', 'P_m'}: the device's parameters at each row (its tp, ep, etp and composition counts: arrays of
    one shape, or numbers)."""
    names = cfg.composition_names(model.family)
    shape = np.shape(rows["tp"])
    tp, ep, etp = (np.asarray(rows[k], dtype=np.int64).reshape(-1) for k in ("tp", "ep", "etp"))
    radix = int(max(tp.max(initial=0), ep.max(initial=0), etp.max(initial=0))) + 1
    key = (tp * radix + ep) * radix + etp  # one integer per (tp, ep, etp): a 1-d unique, not a row sort
    ukey, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    uniq = np.stack([ukey // (radix * radix), (ukey // radix) % radix, ukey % radix], axis=1)
    counts = np.stack([np.asarray(rows[n], dtype=np.float64).reshape(-1) for n in names], axis=1)
    out = {}
    for part, _ in DEVICE_TERMS:
        coef = np.array([_device_coefficients(model, *map(int, u))[part] for u in uniq]).reshape(len(uniq), len(names))
        out[part] = (np.einsum("ij,ij->i", counts, coef[inv]) if len(inv) else np.zeros(0)).reshape(shape)
    return out


def dispatcher_of(schedule: Optional[str], dispatcher: Optional[str] = None) -> str:
    """The experts' dispatcher: as given, else DeepSeek's node-deduplicating one under DualPipe (DeepSeek-V3
    report Sec. 3.2.2: DualPipe with its own all-to-all kernels), Megatron-Core's all-to-all otherwise."""
    if dispatcher is not None:
        if dispatcher not in placement.DISPATCHERS:
            raise TimeError("dispatcher", f"--dispatcher must be one of {', '.join(placement.DISPATCHERS)}, "
                                          f"got {dispatcher!r}")
        return dispatcher
    return "deepep" if schedule == "dualpipe" else "alltoall"


def _groups_kept(model: cfg.ModelSpec) -> int:
    return int(groups_kept(model.named()))


def groups_kept(n):
    """k_g when routing is group-limited (k_g < n_g), else N_r (no limit beyond top-k), of the model's named values
    ``n`` (the page prints this function)."""
    return n.get("k_g", 1) if n.get("n_g", 1) and n.get("k_g", 1) and n.get("k_g", 1) < n.get("n_g", 1) else n["N_r"]


def parts(model: cfg.ModelSpec, training: cfg.Training, rows: Mapping[str, np.ndarray], *, gpu=None,
          schedule: Optional[str] = None, vpp: int = 2, overlap: str = "megatron", efficiency=1,
          gpus_per_node: Optional[int] = None, attention: str = "eager",
          dispatcher: Optional[str] = None) -> Dict[str, np.ndarray]:
    """{part: seconds} (PARTS) of each row.  ``rows``: arrays (broadcasting; tp, ep, etp and the counts of one
    shape) of dp, tp, pp, ep, etp, cp, mbs, seq, zero, recompute (policy names), microbatches (m) and the
    composition counts, and optionally stage (the pipeline rank, whose warm-up the EP overlap leaves exposed:
    :func:`ep_paired_share`; absent, the first rank's, the longest).  Without a schedule the step is one
    micro-batch's steady-state period plus ZeRO-3's traffic (no bubble, per-step traffic or update).
    ``dispatcher``: placement.DISPATCHERS, None as :func:`dispatcher_of`."""
    g = check(model, gpu, overlap, efficiency, training)
    n = np.broadcast_shapes(*(np.shape(x) for x in rows.values()))
    v = inputs(model, training, rows, g, schedule, vpp, efficiency, gpus_per_node, attention, dispatcher, overlap)
    out = getattr(deepseek_time, "step_" + variant(schedule, overlap))(v)
    out = {k: np.broadcast_to(np.asarray(out[k], dtype=np.float64), n) for k in PARTS}
    if schedule is None:  # one micro-batch's period in steady state: the per-step traffic and update not counted
        dp = np.where(v["z"] == 3, out["DP"], 0.0)  # ZeRO-3 gathers and reduces every micro-batch
        out.update(DP=np.broadcast_to(dp, n), optimizer=np.zeros(n), step=out["microbatch"] + dp)
    return out


def switches(overlap: str) -> Dict[str, float]:
    """{o_GR, o_PG, o_EP, o_TP, o_DW: 1 or 0} of ``overlap``: 'none', 'ideal', 'megatron' (its default switches) or
    'megatron:' and a comma-separated list of OVERLAP_SWITCHES (possibly empty: TE's context-parallel ring only)."""
    base, colon, rest = str(overlap).partition(":")
    on = tuple(w for w in rest.split(",") if w) if colon else MEGATRON_DEFAULT
    bad = [w for w in on if w not in OVERLAP_SWITCHES]
    if base not in OVERLAPS or bad or (colon and base != "megatron"):
        raise TimeError("overlap", f"--overlap must be one of {', '.join(OVERLAPS)} or megatron:SWITCH,... (switches: "
                                   f"{', '.join(OVERLAP_SWITCHES)}), got {overlap!r}")
    return {sym: float(name in on) for name, sym in OVERLAP_SWITCHES.items()}


def variant(schedule: Optional[str], overlap: str) -> str:
    """The generated function of an overlap under a schedule (derivations/steptime/model.py variants)."""
    base = str(overlap).partition(":")[0]
    return base + ("_dualpipe" if schedule == "dualpipe" and base == "megatron" else "")


def inputs(model, training, rows, g, schedule, vpp, efficiency, gpus_per_node, attention, dispatcher,
           overlap: str = "megatron") -> Dict:
    """{input name: value or array}: every input of the printed functions (``INPUTS``) at ``rows``."""
    f = lambda k: np.asarray(rows[k], dtype=np.float64)
    v: Dict[str, object] = dict(_model_constants(model, training))
    const = {k: v.pop(k) for k in ("params.hc", "params.compressor.csa", "params.compressor.hca", "params.indexer",
                                   "Phi_rate", "X_A", "X_F", "X_M", "P_U")}
    v.update(TP=f("tp"), CP=f("cp"), PP=f("pp"), EP=f("ep"), ETP=f("etp"), DP=f("dp"), b=f("mbs"), s=f("seq"),
             z=f("zero"), L_d=f("L_d"), L_m=f("L_m"), e_H=f("e_H"), n_mb=f("microbatches"))
    v.update(device_params(model, rows))
    policy = np.asarray(rows["recompute"])
    ops = set(training.recompute_ops if training is not None else ())
    v["rho_full"] = (policy == "full").astype(np.float64)
    v["rho_sel"] = ((policy == "selective") | ((policy == "custom") & ("score" in ops))).astype(np.float64)
    v.update(stage_inputs(v["L_d"], v["L_m"], policy == "custom", const))
    v["c_A"] = 1.0 if attention == "eager" else 0.5
    v["u_E"] = 1.0 if attention == "eager" else 0.0
    if model.family == "deepseek_v4":
        v.update(_v4_attention(model, rows, v, const, attention))
    elif const["params.indexer"]:
        v.update(dsa_attention(np.asarray(rows["seq"], dtype=np.float64), v["L_d"], v["L_m"], f("L_I"), v["P_A"],
                               const["params.indexer"], model.named()))
    v.update(placement.schedule_coefficients(schedule, v["PP"], vpp), **switches(overlap))
    if v["o_EP"]:  # the share of the EP transfers behind the other micro-batch's compute, with the SMs they hold
        paired, held = ep_overlap(g, schedule, dispatcher, efficiency, v["PP"], vpp, v["n_mb"],
                                  f("stage") if "stage" in rows else 0.0)
        v["o_EP"] = paired * (1 - held)
    domain = gpus_per_node or g.nvlink_domain
    v.update(placement.bandwidths(v["TP"], v["CP"], v["DP"], v["PP"], domain, g.rate("nvlink"), g.rate("network")))
    v.update(Phi=g.rate(const["Phi_rate"]), Phi_A=g.rate("bf16"), W_M=g.rate("hbm_bandwidth"))
    link = {"nvlink": 1.0, "network": 1.0}
    if efficiency == PUBLISHED:
        v["eta"] = _published_eta(model, v, g, const["Phi_rate"])
        link = published.links(v["EP"], g)
    else:
        v["eta"] = float(efficiency)
    v["tau_EP"] = placement.dispatch_seconds(v["EP"], v["ETP"], domain, g.rate("nvlink") * link["nvlink"],
                                             g.rate("network") * link["network"], model.N_r, _groups_kept(model),
                                             dispatcher_of(schedule, dispatcher))
    return v


def ep_paired_share(schedule: Optional[str], pp, vpp: int, m, rank):
    """The share of a device's micro-batch forwards (and as many backwards) that Megatron-Core's 1F1B A2A overlap
    (--overlap-moe-expert-parallel-comm) runs beside another micro-batch's backward (forward): all but the warm-up
    forwards and the cool-down backwards, which run alone with their all-to-all exposed.  Warm-up of pipeline rank
    ``rank`` (megatron/core/pipeline_parallel/schedules.py@d98e8a64ddf3 get_pp_rank_microbatches, L951-977):
    interleaved 2 (pp - rank - 1) + (V - 1) pp of its m V chunk-forwards (micro-batch groups of pp, the default), 1F1B
    pp - rank - 1 of m (the overlap requires interleaving when pp > 1; the same count is read for 1f1b and zb), each
    plus "one extra micro-batch forward step before the 1f1b stages" under the overlap (L966-970; at pp = 1 the
    combined schedule's first forward and last backward run alone: 1 of m); at most all of them.  Without a schedule
    (one micro-batch's steady state) all are paired."""
    if schedule is None:
        return 1.0
    chunks = vpp if schedule == "interleaved" else 1
    warm = 2 * (pp - rank - 1) + (chunks - 1) * pp + 1 if schedule == "interleaved" else pp - rank
    total = m * chunks
    return 1 - np.minimum(warm, total) / total


def ep_overlap(g, schedule, dispatcher, efficiency, pp, vpp: int, m, rank) -> tuple:
    """(paired, held) of --overlap megatron:ep on ``g``: the micro-batches paired (:func:`ep_paired_share`) and,
    under --efficiency published, the share of the SMs the dispatch holds (efficiency.py overlap_sms)."""
    held = published.overlap_sms(g, dispatcher_of(schedule, dispatcher)) if efficiency == PUBLISHED else 0.0
    return ep_paired_share(schedule, pp, vpp, m, rank), held


def _published_eta(model: cfg.ModelSpec, v: Dict, g: "gpu_presets.GPU", precision: str) -> np.ndarray:
    """eta under --efficiency published (efficiency.py): the one efficiency giving a micro-batch's products their
    time at their own published efficiencies: dense ones at DeepGEMM's at M = b s / (CP TP), the routed experts'
    grouped GEMM at M = b s EP N_r / (CP TP N) per expert (``precision`` on ``g``), the scores at cuDNN's at s."""
    tokens = v["b"] * v["s"] / (v["CP"] * v["TP"])
    layers = v["L_d"] + v["L_m"]
    dense = layers * v["P_A"] + v["L_d"] * v["P_F"] + v["L_m"] * (v["P_R"] + v["F"] * v["N_s"] * v["P_E"]) \
        + v["e_H"] * v["P_H"]
    experts = (v["L_m"] + v["e_H"] * v["D_M"]) * v["F"] * v["N_r"] * v["P_E"]
    dense = dense + v["e_H"] * v["D_M"] * (v["P_M"] - v["F"] * v["N_r"] * v["P_E"])  # the MTP modules'
    scores = (layers + v["e_H"] * v["D_M"]) * v["c_A"] * v["s"] * v["n_h"] * (v["d_h"] + v["d_hr"] + v["d_v"])
    e_d = published.gemm(tokens)
    e_g = published.gemm(tokens * v["EP"] * model.N_r / (model.named().get("N") or model.N_r), grouped=True, gpu=g,
                          precision=precision)
    e_a = published.attention(v["s"])
    peak = (dense + experts) / v["Phi"] + scores / v["Phi_A"]
    achieved = dense / (e_d * v["Phi"]) + experts / (e_g * v["Phi"]) + scores / (e_a * v["Phi_A"])
    return np.where(achieved > 0, peak / np.where(achieved > 0, achieved, 1.0), 1.0)


def dsa_attention(s, L_d, L_m, L_I, P_A, indexer, n):
    """DeepSeek Sparse Attention (DeepSeek-V3.2 report, arXiv:2512.02556, Sec. 2.1; transformers 5.24 deepseek_v32,
    glm_moe_dsa) on a stage of L_d + L_m layers, L_I of them with a lightning indexer (``n``: the model's named
    values): 'c_A', each query's k_I chosen keys (causal mean k_I (1 - k_I / 2s), s/2 below k_I) and the indexers'
    scores (n_I heads of d_I, as key-equivalents); 'P_A' with the indexers' projections (``indexer`` parameters
    each).  Arrays or floats: the page prints it."""
    layers = maximum(L_d + L_m, 1)
    chosen = select([s >= n["k_I"]], [n["k_I"] * (1 - n["k_I"] / (2 * s))], default=s / 2)
    keys = (L_d + L_m) * chosen + L_I * (n["n_I"] * n["d_I"] * s / 2 / (n["n_h"] * (n["d_h"] + n["d_hr"] + n["d_v"])))
    return {"c_A": keys / (layers * s), "P_A": P_A + L_I * indexer / layers}


def stage_inputs(L_d, L_m, custom, k):
    """{'P_U', 'Q_C'} of a stage of L_d dense and L_m MoE layers: the parameters per token the custom recomputation
    re-runs (``custom``: the policy is; ``k['P_U']``: :func:`_recomputed`'s per layer) and the bytes the linear
    layers' inputs are cast to (``k``: :func:`constants`).  Arrays or floats: the page prints it."""
    return {"P_U": select([custom], [(L_d + L_m) * k["P_U"]["A"] + L_d * k["P_U"]["F"] + L_m * k["P_U"]["M"]],
                          default=0.0),
            "Q_C": (L_d + L_m) * k["X_A"] + L_d * k["X_F"] + L_m * k["X_M"]}


def _v4_attention(model: cfg.ModelSpec, rows, v, const, attention: str) -> Dict[str, np.ndarray]:
    """DeepSeek-V4's attention on each row's stage (transformers 5.24 models/deepseek_v4): 'c_A', the share of the s
    keys each query's scores and values are computed for, over the stage's layers (fused: the sliding window w, a
    CSA layer's k_I compressed entries, an HCA layer's causal half of s / m_H; eager: every score of s, s + T_C or
    s + T_H keys), with the CSA indexer's key-equivalents; 'u_E' the eager columns over s; 'P_A' with compressors."""
    n = model.named()
    s = np.asarray(rows["seq"], dtype=np.float64)
    csa, hca = (np.asarray(rows[k], dtype=np.float64) for k in ("L_C", "L_H"))
    layers = np.maximum(v["L_d"] + v["L_m"], 1)
    t_c, t_h = s / n["m_C"], s / n["m_H"]
    per_key = 2 * n["n_h"] * n["d_a"]  # FLOPs of one key's score and value per query (forward: multiply-adds x 2)
    indexer = 2 * n["n_I"] * n["d_I"] * t_c / 2 / per_key
    if attention == "eager":
        columns = layers * s + csa * t_c + hca * t_h
        keys, u_e = columns + csa * indexer, columns / (layers * s)
    else:
        keys, u_e = layers * np.minimum(n["w"], s) + csa * (np.minimum(n["k_I"], t_c) + indexer) + hca * t_h / 2, 0.0
    return {"c_A": keys / (layers * s), "u_E": u_e,
            "P_A": v["P_A"] + (csa * const["params.compressor.csa"] + hca * const["params.compressor.hca"]) / layers}


def layout_time(model: cfg.ModelSpec, layout: cfg.Layout, training: cfg.Training, *, gpu=None,
                overlap: str = "megatron", efficiency=1, gpus_per_node: Optional[int] = None,
                dispatcher: Optional[str] = None, with_inputs: bool = False, every: bool = False) -> Dict:
    """One configuration's step (``memsym estimate --time``): {'stage': the slowest stage's index, 'gpu': the
    preset's key, 'parts': {part: seconds} at that stage, 'tokens_per_gpu_s', 'microbatches', 'dispatcher'};
    ``every`` adds 'stages': [{'stage', 'parts'}] of every stage (``--all-stages --time``); with the EP overlap
    switched on, 'ep_overlap': {'paired' (:func:`ep_paired_share`), 'sms_held' (efficiency.py overlap_sms), 'hidden'
    (the share of the all-to-all behind compute at most)} at the slowest stage.
    The policies the model times are none, full and selective (custom operator lists are refused)."""
    g = check(model, gpu, overlap, efficiency, training)
    sts = cfg.stages(model, layout)
    m = training.microbatches or 1
    names = cfg.composition_names(model.family)
    rows = {k: np.array([getattr(layout, k)] * len(sts)) for k in ("dp", "tp", "pp", "ep", "etp", "cp")}
    rows.update(mbs=np.array([training.mbs] * len(sts)), seq=np.array([training.seq] * len(sts)),
                zero=np.array([training.zero] * len(sts)), recompute=np.array([training.recompute] * len(sts)),
                microbatches=np.array([m] * len(sts)), stage=np.array([st.index for st in sts]))
    for n in names:
        rows[n] = np.array([st.named()[n] for st in sts])
    out = parts(model, training, rows, gpu=g, schedule=training.schedule, vpp=training.vpp or 2, overlap=overlap,
                efficiency=efficiency, gpus_per_node=gpus_per_node, attention=training.attention,
                dispatcher=dispatcher)
    slow = int(np.argmax(out["step"]))
    step = float(out["step"][slow])
    if switches(overlap)["o_EP"]:  # what --overlap megatron:ep hides at that stage, said beside the time
        paired, held = (float(x) for x in ep_overlap(g, training.schedule, dispatcher, efficiency, layout.pp,
                                                     training.vpp or 2, m, sts[slow].index))
        hid = {"paired": paired, "sms_held": held, "hidden": paired * (1 - held)}
    gpus = layout.dp * layout.tp * layout.pp * layout.cp
    return {"stage": sts[slow].index, "gpu": g.key, "overlap": overlap,
            "efficiency": efficiency if efficiency == PUBLISHED else float(efficiency),
            "precision": RECIPE_RATES[training.linear_recipe], "nvlink_domain": gpus_per_node or g.nvlink_domain,
            "attention": None if model.family != "deepseek_v4" else training.attention
            + (" (V4: all s + T keys)" if training.attention == "eager" else " (V4: window + compressed keys)"),
            "dispatcher": dispatcher_of(training.schedule, dispatcher), "microbatches": m,
            **({"ep_overlap": hid} if switches(overlap)["o_EP"] else {}),
            "parts": {k: float(v[slow]) for k, v in out.items()},
            "tokens_per_gpu_s": layout.dp * m * training.mbs * training.seq / (step * gpus) if step > 0 else None,
            **({"inputs": {k: float(np.asarray(x).reshape(-1)[slow if np.size(x) > 1 else 0]) for k, x in
                           inputs(model, training, rows, g, training.schedule, training.vpp or 2, efficiency,
                                  gpus_per_node, training.attention, dispatcher, overlap).items()},
                "composition": sts[slow].named()} if with_inputs else {}),
            **({"stages": [{"stage": st.index, "parts": {k: float(v[i]) for k, v in out.items()}}
                           for i, st in enumerate(sts)]} if every else {})}
