"""Megatron-LM's arguments (a launch read by :mod:`derivations.config.launch`) as memsym's options: the model built
as Megatron builds it (a DeepSeek-family config.json) and every memory-relevant flag mapped onto an option of
``memsym estimate`` with where it came from (what ``--explain`` prints); any other flag is ignored (:data:`IGNORED`)
or named in the not-modelled warning (:attr:`Resolution.unmodelled`).  Sources, NVIDIA/Megatron-LM at
d98e8a64ddf34856e74b24714e3bedb2f5a39553: ARGS megatron/training/arguments.py, TC
megatron/core/transformer/transformer_config.py, MPC megatron/core/model_parallel_config.py, TOK
megatron/core/tokenizers/utils/build_tokenizer.py, LAY megatron/core/transformer/pipeline_parallel_layer_layout.py."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from derivations.config.grammars import layer_pattern, pipeline_layout
from derivations.config.launch import Launch, shown
from derivations.config.megatron_precision import dtypes, quantization
from derivations.config.training import CUDA_GRAPH_SCOPES
from derivations.config.megatron_flags import (
    ARGS, GPT2_VOCAB, IGNORED, KNOWN_TOKENIZER_MODELS, MPC, OVERLAP_FLAGS, RECOMPUTE_MODULES, TC)


@dataclass
class Resolution:
    """memsym's options of a launch (dest -> value as typed) and the config.json fields built from its flags (None
    under a typed --model), each with where it came from; the flags not modelled and the assumptions taken."""

    options: Dict[str, str] = field(default_factory=dict)
    origin: Dict[str, str] = field(default_factory=dict)
    model: Optional[Dict[str, object]] = None
    model_origin: Dict[str, str] = field(default_factory=dict)
    unmodelled: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def put(self, dest: str, value, origin: str) -> None:
        self.options[dest], self.origin[dest] = str(value), origin


class _Args:
    """The launch's flags, read one at a time (each read flag is remembered: the rest are warned about)."""

    def __init__(self, launch: Launch):
        self.l, self.used, self.extra = launch, set(), []

    def has(self, flag: str) -> bool:
        self.used.add(flag)
        return flag in self.l.flags

    def switch(self, flag: str) -> bool:
        """Whether the switch ``flag`` is given (store_true: a value, as ``maybe``, is refused)."""
        if self.has(flag) and self.l.flags[flag]:
            raise self.l.err(f"{flag} {' '.join(shown(w) for w in self.l.flags[flag])!r}: a switch takes no value "
                             "(in a model_config.yaml: true or false)")
        return self.has(flag)

    def words(self, flag: str) -> Tuple[str, ...]:
        self.used.add(flag)
        return self.l.words(flag)

    def text(self, flag: str, default=None) -> Tuple[Optional[str], str]:
        """(value, where from): the flag's value, else ``default`` (with its source in ``default``'s tuple)."""
        self.used.add(flag)
        if flag in self.l.flags:
            val = self.l.value(flag)
            return val, f"{flag} {val}"
        if isinstance(default, tuple):
            return default[0], f"Megatron default ({default[1]})"
        return default, "absent"

    def int(self, flag: str, default=None, low: int = 1) -> Tuple[Optional[int], str]:
        val, src = self.text(flag, default)
        if val is None or isinstance(val, int):
            return val, src
        try:
            n = int(val, 10) if len(val) <= 9 else None
        except ValueError:
            n = None
        if n is None or n < low:
            raise self.l.err(f"{flag} {shown(val)!r}: expected an integer >= {low}")
        return n, src

    def choice(self, flag: str, default, choices) -> Tuple[str, str]:
        val, src = self.text(flag, default)
        if val not in choices:
            raise self.l.err(f"{flag} {shown(str(val))!r}: Megatron accepts {', '.join(choices)}")
        return val, src


def resolve(launch: Launch, gpus: Optional[int] = None, dp: Optional[int] = None, vocab: Optional[int] = None,
            build_model: bool = True, known: Tuple[str, ...] = (),
            typed: Optional[Dict[str, int]] = None) -> Resolution:
    """The memsym options of ``launch``; ``gpus``/``dp``/``vocab`` typed on memsym's command line, ``known``: the
    optional memsym options a flag may be mapped onto."""
    a, r = _Args(launch), Resolution()
    put = r.put

    # -- parallel layout (MPC; ARGS validate_args) -------------------------------------------------------
    typed = typed or {}
    tp, tp_src = a.int("--tensor-model-parallel-size", (1, f"{MPC} tensor_model_parallel_size"))
    pp, pp_src = a.int("--pipeline-model-parallel-size", (1, f"{MPC} pipeline_model_parallel_size"))
    cp, cp_src = a.int("--context-parallel-size", (1, f"{MPC} context_parallel_size"))
    # TP, PP and CP typed beside the file: what DP, ETP's default, SP and the vocabulary's padding derive from
    tp, pp, cp = typed.get("tp", tp), typed.get("pp", pp), typed.get("cp", cp)
    ep, ep_src = a.int("--expert-model-parallel-size", (1, f"{MPC} expert_model_parallel_size"))
    if ep > 1 and not a.has("--num-experts"):
        raise launch.err(f"--expert-model-parallel-size {ep} without --num-experts ({ARGS} validate_args: "
                         "num_experts must be non None to use expert model parallelism)")
    etp, etp_src = a.int("--expert-tensor-parallel-size",
                         (tp, f"{ARGS} validate_args: expert_tensor_parallel_size = tensor_model_parallel_size"))
    size = tp * pp * cp
    if dp is not None:
        world, world_src = dp * size, "typed --dp"
    elif gpus is not None:
        world, world_src = gpus, f"--gpus {gpus}"
    elif launch.world is not None:
        world, world_src = launch.world, launch.world_from
    else:
        raise launch.err("the world size is not in the file (a model_config.yaml never holds it; the test recipes "
                         "of Megatron-LM run on 8 GPUs, tests/test_utils/recipes): give --gpus N (or --dp)")
    if world % size:
        raise launch.err(f"{world} GPUs ({world_src}) is not divisible by TP x PP x CP = {size} ({ARGS} "
                         f"validate_args asserts it)")
    put("dp", world // size, f"{world_src} / (TP {tp} x PP {pp} x CP {cp}) ({ARGS} validate_args: data_parallel_size)")
    if launch.per_node and "gpus_per_node" in known:  # places the rings and PP peers (--memory device, --time)
        put("gpus_per_node", launch.per_node, f"torchrun --nproc-per-node {launch.per_node}: the GPUs of a node")
    for dest, val, src in (("tp", tp, tp_src), ("pp", pp, pp_src), ("ep", ep, ep_src), ("etp", etp, etp_src),
                           ("cp", cp, cp_src)):
        put(dest, val, src)
    sp_on = a.has("--sequence-parallel")
    put("sp", tp if sp_on and tp > 1 else 1,
        ("--sequence-parallel: SP = TP" if sp_on else f"no --sequence-parallel ({MPC} sequence_parallel False)")
        + (f" ({ARGS} validate_args turns it off at TP 1)" if sp_on and tp == 1 else ""))

    # -- the model (TC; ARGS validate_args; TOK) --------------------------------------------------------
    layers, _ = a.int("--num-layers")
    if layers is None:
        raise launch.err("--num-layers is required (Megatron's GPT model has no default)")
    moe_pattern = _moe_pattern(a, layers)  # (parsed as Megatron's argparse does, with or without experts)
    if not a.has("--num-experts"):  # TC num_moe_experts None: an MLA model without experts, every layer dense
        moe_pattern = [0] * layers
    mtp, mtp_src = a.int("--mtp-num-layers", (0, f"{TC} mtp_num_layers None: no MTP"), low=0)
    if build_model:
        r.model, r.model_origin = _model(a, launch, layers, moe_pattern, mtp, tp, r.notes, vocab)

    # -- pipeline split and virtual stages (ARGS validate_args; LAY) ------------------------------------
    _pipeline(a, launch, r, put, layers, pp, moe_pattern, mtp)

    # -- training ------------------------------------------------------------------------------------------
    mbs, src = a.int("--micro-batch-size")
    if mbs is None:
        raise launch.err("--micro-batch-size is required (Megatron's training loop has no default)")
    put("mbs", mbs, src)
    seq, src = a.int("--seq-length")
    if seq is None:
        raise launch.err("--seq-length is required (pretrain_gpt.py has no default)")
    put("seq", seq, src)
    gb, src = a.int("--global-batch-size", (mbs * world // size, f"{ARGS} validate_args: micro_batch_size x "
                                                                  f"data_parallel_size"))
    put("global_batch", gb, src)
    cf, src = a.text("--moe-expert-capacity-factor")  # TC moe_expert_capacity_factor None: dropless
    policy, _ = a.choice("--moe-token-drop-policy", ("probs", f"{TC} moe_token_drop_policy"), ("probs", "position"))
    if cf is not None:  # the worst EP rank's F bounded (training.py capacity_imbalance)
        put("capacity_factor", cf, f"{src}, drop policy {policy} (which tokens drop, not how many)")
    if a.switch("--moe-pad-expert-input-to-capacity"):
        if cf is None:
            raise launch.err(f"--moe-pad-expert-input-to-capacity without --moe-expert-capacity-factor ({TC} "
                             "__post_init__: moe_expert_capacity_factor must be set to use it)")
        put("pad_to_capacity", True, "--moe-pad-expert-input-to-capacity: every expert padded to its capacity")
    _recompute(a, launch, r, put)
    backend, src = a.text("--attention-backend", ("auto", f"{TC} attention_backend AttnBackend.auto"))
    if a.has("--use-flash-attn"):
        backend, src = "flash", "--use-flash-attn"
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise launch.err(f"--attention-backend {backend!r}: Megatron accepts flash, fused, unfused, local, auto")
    put("attention", "eager" if backend in ("unfused", "local") else "flash",
        f"{src}: {'an unfused backend keeps the s^2 scores' if backend in ('unfused', 'local') else 'fused'}")
    dtypes(a, launch, r, put)
    if mtp:
        put("mtp", True, f"--mtp-num-layers {mtp}: the MTP modules' weights on the last stage")
        put("mtp_activations", "last-stage", f"--mtp-num-layers {mtp}: Megatron-Core builds them on the last stage")
    if "overlap" in known:  # the step time's Megatron switches (none of the flags: only TE's context-parallel ring)
        on = [(f, n) for f, n in OVERLAP_FLAGS if a.has(f)]
        put("overlap", "megatron:" + ",".join(n for _, n in on), ", ".join(f for f, _ in on) or f"none ({ARGS}: off)")
    _conventions(a, launch, r, put, known)
    quantization(a, launch, r, put, known)
    if r.options.get("zero") == "3" and "linear_recipe" in r.options:  # Megatron-FSDP optim_grads_params
        read = [r.origin.pop(d) for d in ("linear_recipe", "quantized_param_gather") if r.options.pop(d, None)]
        r.unmodelled.append("; ".join(read) + ": under Megatron-FSDP's sharded parameters (ZeRO-3) TE's quantized "
                            "linear layers and weight copies are not modelled (counted in BF16)")
    if "cuda_graphs" in known:
        _cuda_graphs(a, launch, put)
    for env, dest in (("PYTORCH_CUDA_ALLOC_CONF", "alloc_conf"), ("NCCL_BUFFSIZE", "nccl_buffsize")):
        if dest in known and launch.env.get(env) not in (None, ""):  # what --memory reads (issue 46)
            put(dest, launch.env[env], f"ENV_VARS {env}")
    r.unmodelled = [" ".join((f,) + tuple(shown(w) for w in launch.flags[f]))
                    for f in launch.flags if f not in a.used and f not in IGNORED] + r.unmodelled + a.extra
    return r


def _cuda_graphs(a: _Args, launch: Launch, put) -> None:
    """TE's CUDA graphs (--cuda-graph-impl, --cuda-graph-modules) as --cuda-graphs, when memsym captures each module."""
    f = launch.flags
    te = "--external-cuda-graph" in f or ("--cuda-graph-impl" in f and launch.value("--cuda-graph-impl")
                                          == "transformer_engine")
    flag = "--cuda-graph-scope" if "--cuda-graph-scope" in f else "--cuda-graph-modules"
    mods = [w for m in launch.words(flag) for w in m.strip("[]").replace(",", " ").split()]
    scopes = ["layer"] if mods in ([], ["full"]) else mods
    if not te or not set(scopes) <= set(CUDA_GRAPH_SCOPES):
        return
    used = [x for x in ("--external-cuda-graph", "--cuda-graph-impl", flag) if a.has(x)]
    warmup, w_src = a.int("--cuda-graph-warmup-steps", (3, f"{TC} cuda_graph_warmup_steps"), low=0)
    put("cuda_graphs", ",".join(scopes), " ".join(used) + ": Transformer Engine's make_graphed_callables")
    put("cuda_graph_warmup_steps", warmup, w_src)


def _moe_pattern(a: _Args, layers: int) -> List[int]:
    """Which layers are MoE: --moe-layer-freq (an integer N: layer i iff i % N == 0; or a list expression)."""
    val, _ = a.text("--moe-layer-freq", ("1", f"{TC} moe_layer_freq"))
    if "[" in val:
        pattern = layer_pattern(val)
        if len(pattern) != layers:
            raise a.l.err(f"--moe-layer-freq {val!r} lists {len(pattern)} layers, --num-layers is {layers}")
        return pattern
    freq, _ = a.int("--moe-layer-freq", ("1", ""))
    return [int(i % freq == 0) for i in range(layers)]


def _model(a: _Args, launch: Launch, layers: int, pattern: List[int], mtp: int, tp: int, notes: List[str],
           typed_vocab: Optional[int]):
    """The config.json fields (DeepseekV3Config's names) of the model the flags build, and each one's source."""
    if not a.has("--multi-latent-attention"):
        raise launch.err("no --multi-latent-attention: memsym's DeepSeek family has MLA attention (give --model "
                         "for another config)")
    experts, e_src = a.int("--num-experts")
    if experts is None:  # an MLA model without experts: every layer a dense MLP
        experts, e_src = 1, "no --num-experts: every layer dense (TC num_moe_experts None); one placeholder expert"
    if not a.has("--swiglu"):
        a.extra.append("no --swiglu (GeLU MLPs; memsym counts SwiGLU)")
    h, h_src = a.int("--hidden-size")
    heads, n_src = a.int("--num-attention-heads")
    if h is None or heads is None:
        raise launch.err("--hidden-size and --num-attention-heads are required")
    ffn, f_src = a.int("--ffn-hidden-size", (int((4 * h * 2 / 3) / 64) * 64, f"{ARGS} validate_args: "
                                                                             f"int(4h 2/3 / 64) 64 with --swiglu"))
    moe_ffn, m_src = a.int("--moe-ffn-hidden-size", (ffn, f"{ARGS} validate_args: ffn_hidden_size"))
    shared, s_src = a.int("--moe-shared-expert-intermediate-size", (0, f"{TC} None: no shared expert"), low=0)
    shared, s_src = (shared, s_src) if any(pattern) else (0, e_src)
    if shared % moe_ffn:
        raise launch.err(f"--moe-shared-expert-intermediate-size {shared} is not a multiple of the expert's "
                         f"{moe_ffn}: memsym counts shared experts of the routed experts' size")
    topk, k_src = a.int("--moe-router-topk", (2, f"{TC} moe_router_topk")) if any(pattern) else (1, e_src)
    q_lora, q_src = a.int("--q-lora-rank", (None, f"{ARGS} _add_mla_args: None, no query compression"))
    kv_lora, kv_src = a.int("--kv-lora-rank", (32, f"{ARGS} _add_mla_args"))
    qk, qk_src = a.int("--qk-head-dim", (128, f"{ARGS} _add_mla_args"))
    pos, pos_src = a.int("--qk-pos-emb-head-dim", (64, f"{ARGS} _add_mla_args"))
    v, v_src = a.int("--v-head-dim", (128, f"{ARGS} _add_mla_args"))
    score, sc_src = a.choice("--moe-router-score-function", ("softmax", f"{TC} moe_router_score_function"),
                             ("softmax", "sigmoid"))
    bias = a.has("--moe-router-enable-expert-bias")
    pre = a.has("--moe-router-pre-softmax")
    groups, g_src = a.int("--moe-router-num-groups", (None, f"{TC} None"))
    group_topk, gk_src = a.int("--moe-router-group-topk", (None, f"{TC} None: no group-limited top-k"))
    untied = a.has("--untie-embeddings-and-output-weights")
    vocab, v_orig = _vocab(a, launch, typed_vocab, notes)
    multiple, d_src = a.int("--make-vocab-size-divisible-by", (128, f"{ARGS} _add_network_size_args"))
    padded = math.ceil(vocab / (multiple * tp)) * multiple * tp
    dense = next((i for i, x in enumerate(pattern) if x), layers)
    freq = next((f for f in range(1, layers + 1)
                 if pattern == [int(i >= dense and i % f == 0) for i in range(layers)]), None)
    if freq is None:
        raise launch.err(f"--moe-layer-freq gives MoE layers {[i for i, x in enumerate(pattern) if x][:12]}...: "
                         "memsym's DeepSeek model holds leading dense layers then every f-th layer MoE")
    if not any(pattern):
        groups, group_topk = 1, 1
    elif group_topk is None:
        notes.append("no --moe-router-group-topk: Megatron routes without groups; memsym's deepseek_v3 model takes "
                     "DeepseekV3Config's 8 groups, 4 kept (the group-limited top-k's bookkeeping, freed in the "
                     "forward)")
    norm_src = ("sigmoid scores are normalised over the top-k" if score == "sigmoid" else
                "--moe-router-pre-softmax: not normalised" if pre else "softmax over the top-k")
    vocab_src = (f"{v_orig} padded to a multiple of {d_src.split()[-1] if d_src.startswith('--') else multiple} x TP "
                 f"{tp} = {multiple * tp} (TOK vocab_size_with_padding)")
    rows = (  # (config.json field, value, where it came from; None: not said)
        ("model_type", "deepseek_v3", None), ("hidden_size", h, h_src), ("intermediate_size", ffn, f_src),
        ("moe_intermediate_size", moe_ffn, m_src), ("num_hidden_layers", layers, f"--num-layers {layers}"),
        ("first_k_dense_replace", dense, f"--moe-layer-freq: {dense} leading dense layers"),
        ("moe_layer_freq", freq, f"--moe-layer-freq: then every {freq} layer(s) MoE"),
        ("num_attention_heads", heads, n_src), ("num_key_value_heads", heads, None), ("q_lora_rank", q_lora, q_src),
        ("kv_lora_rank", kv_lora, kv_src), ("qk_nope_head_dim", qk, qk_src), ("qk_rope_head_dim", pos, pos_src),
        ("v_head_dim", v, v_src), ("n_routed_experts", experts, e_src),
        ("n_shared_experts", shared // moe_ffn, f"{s_src} / moe_ffn_hidden_size {moe_ffn}"),
        ("num_experts_per_tok", topk, k_src),
        ("topk_method", "noaux_tc" if bias else "greedy",
         "--moe-router-enable-expert-bias" if bias else "no expert bias"),
        ("scoring_func", score, sc_src), ("norm_topk_prob", score == "sigmoid" or not pre, norm_src),
        ("num_nextn_predict_layers", mtp, f"--mtp-num-layers {mtp}" if mtp else "no --mtp-num-layers"),
        ("tie_word_embeddings", not untied,
         "--untie-embeddings-and-output-weights" if untied else "tied (Megatron default)"),
        ("vocab_size", padded, vocab_src), ("n_group", groups, g_src), ("topk_group", group_topk, gk_src))
    fields = {k: x for k, x, _ in rows if x is not None or k not in ("n_group", "topk_group")}
    return fields, {k: src for k, _, src in rows if k in fields and src is not None}


def _vocab(a: _Args, launch: Launch, typed: Optional[int], notes: List[str]) -> Tuple[int, str]:
    """The tokenizer's vocabulary before Megatron's padding, and where it came from."""
    if typed is not None:
        return typed, f"typed --vocab-size {typed}"
    size, src = a.int("--vocab-size")
    if size is not None:
        return size, src
    kind, _ = a.text("--tokenizer-type")
    a.used.add("--tokenizer-model")
    model = launch.flags.get("--tokenizer-model")  # only its file name is read: a path variable may stay unset
    if kind == "GPT2BPETokenizer" or (kind is None and a.has("--vocab-file") and a.has("--merge-file")):
        notes.append(f"vocabulary: the GPT-2 BPE vocab.json, {GPT2_VOCAB:,} tokens (the file is not opened)")
        source = "--tokenizer-type GPT2BPETokenizer" if kind else "--vocab-file, --merge-file"
        return GPT2_VOCAB, f"GPT-2 BPE ({source})"
    name = os.path.basename(shown(model[0])) if model else None
    if name in KNOWN_TOKENIZER_MODELS:
        size, why = KNOWN_TOKENIZER_MODELS[name]
        notes.append(f"vocabulary: --tokenizer-model {name}: {why} (an assumption: the file is not opened)")
        return size, f"--tokenizer-model {name} ({size:,}, assumed)"
    raise launch.err(f"the vocabulary size is in the tokenizer's files ({kind or 'no --tokenizer-type'}"
                     f"{', ' + name if name else ''}), which memsym does not open: type --vocab-size N (before "
                     f"Megatron's padding)")


def _pipeline(a: _Args, launch: Launch, r: Resolution, put, layers: int, pp: int, pattern: List[int], mtp: int):
    layout, _ = a.text("--pipeline-model-parallel-layout")
    if layout is not None:  # Megatron-LM's functional tests escaped it for their harness (Et*3\\|\\(tt\\|\\)*6L), which
        # unescapes it twice (tests/functional_tests/shell_test_utils/_run_training.sh at 310082a6: xargs, then
        # eval); a layout has no backslash of its own (LAY parse_str_to_list)
        layout = layout.replace("\\", "")
    per_stage, _ = a.int("--num-layers-per-virtual-pipeline-stage")
    per_rank, vs_src = a.int("--num-virtual-stages-per-pipeline-rank")
    first, f_src = a.int("--decoder-first-pipeline-num-layers", low=0)
    last, l_src = a.int("--decoder-last-pipeline-num-layers", low=0)
    if sum(x is not None for x in (layout, per_stage, per_rank)) > 1:
        raise launch.err(f"at most one of --pipeline-model-parallel-layout, --num-layers-per-virtual-pipeline-stage, "
                         f"--num-virtual-stages-per-pipeline-rank ({ARGS} validate_args asserts it)")
    vpp = None
    if layout is not None:
        stages = pipeline_layout(layout)
        if len(stages) % pp:
            raise launch.err(f"--pipeline-model-parallel-layout has {len(stages)} stages, not a multiple of PP {pp}")
        counts = [s.count("t") for s in stages]
        if sum(counts) != layers or "E" not in stages[0] or "L" not in stages[-1]:
            raise launch.err(f"--pipeline-model-parallel-layout {layout!r}: {sum(counts)} decoder layers (t) for "
                             f"--num-layers {layers}, E first and L last ({'LAY'} validate_layer_layout)")
        if sum(s.count("m") for s in stages) != mtp or (mtp and "m" not in stages[-1]):
            raise launch.err(f"--pipeline-model-parallel-layout {layout!r}: memsym places the {mtp} MTP module(s) "
                             f"(m) in the last virtual stage")
        v = len(stages) // pp
        split = [sum(counts[j] for j in range(i, len(stages), pp)) for i in range(pp)]
        put("layers_per_stage", ",".join(map(str, split)), f"--pipeline-model-parallel-layout {layout}: each rank's "
                                                         f"decoder layers (virtual stage j on rank j mod PP)")
        if v > 1:
            vpp = (v, f"--pipeline-model-parallel-layout: {len(stages)} virtual stages / PP {pp} ({ARGS} "
                      f"validate_args)")
            if _same_composition(counts, split, pattern, pp):
                put("virtual_layers", ",".join(map(str, counts)), f"--pipeline-model-parallel-layout {layout}")
            else:
                r.notes.append(f"--pipeline-model-parallel-layout {layout}: its virtual stages give some ranks dense "
                               f"layers a contiguous split does not, which memsym cannot hold; each rank's "
                               f"{'/'.join(map(str, split))} layers taken in {v} equal chunks")
    else:
        if per_rank is not None:
            vpp = (per_rank, vs_src)
        elif per_stage is not None:
            if layers % pp or (layers // pp) % per_stage:
                raise launch.err(f"--num-layers-per-virtual-pipeline-stage {per_stage} does not divide {layers} "
                                 f"layers / PP {pp}")
            vpp = (layers // pp // per_stage, f"--num-layers-per-virtual-pipeline-stage {per_stage}")
        if first is not None or last is not None:
            middle = layers - (first or 0) - (last or 0)
            inner = pp - (first is not None) - (last is not None)
            if middle < 0 or (inner and middle % inner) or (not inner and middle):
                raise launch.err(f"--decoder-first/last-pipeline-num-layers leave {middle} layers for {inner} stages")
            split = ([first] if first is not None else []) + ([middle // inner] * inner if inner else []) \
                + ([last] if last is not None else [])
            put("layers_per_stage", ",".join(map(str, split)), " ".join(s for s in (f_src, l_src) if s != "absent"))
        elif layers % pp:
            raise launch.err(f"--num-layers {layers} is not divisible by PP {pp} (Megatron asserts it without "
                             f"--decoder-first/last-pipeline-num-layers or a layout)")
    if vpp is not None and vpp[0] > 1:
        put("schedule", "interleaved", f"{vpp[1]}: Megatron's interleaved 1F1B")
        put("vpp", vpp[0], vpp[1])
    elif pp > 1:
        put("schedule", "1f1b", f"PP {pp}: Megatron's 1F1B (no virtual stages)")


def _same_composition(counts: List[int], split: List[int], pattern: List[int], pp: int) -> bool:
    """Whether every rank holds, under the layout, the dense and MoE layers of the contiguous split ``split``."""
    starts = [sum(counts[:j]) for j in range(len(counts))]
    for i in range(pp):
        own = [k for j in range(i, len(counts), pp) for k in range(starts[j], starts[j] + counts[j])]
        lo = sum(split[:i])
        if sum(pattern[k] for k in own) != sum(pattern[lo:lo + split[i]]):
            return False
    return True


def _recompute(a: _Args, launch: Launch, r: Resolution, put):
    gran, src = a.text("--recompute-granularity", (None, f"{TC} recompute_granularity None"))
    method, m_src = a.text("--recompute-method", (None, f"{TC} recompute_method None"))
    count, n_src = a.int("--recompute-num-layers", (None, f"{TC} recompute_num_layers None"))
    mods = a.words("--recompute-modules") if a.has("--recompute-modules") else ()
    if gran is None:
        put("recompute", "none", f"no --recompute-granularity ({TC} recompute_granularity None)")
    elif gran == "full":
        if method is None:
            raise launch.err(f"--recompute-granularity full needs --recompute-method uniform or block ({ARGS})")
        if not (method == "uniform" and (count or 1) == 1):
            r.unmodelled.append(f"--recompute-method {method} --recompute-num-layers {count}")
        put("recompute", "full", f"{src} {m_src}" + (f" {n_src}" if count else ""))
    elif gran == "selective":
        names = [w for m in mods for w in m.strip("[]").replace(",", " ").split()] or ["core_attn"]
        unknown = [m for m in names if m not in RECOMPUTE_MODULES]
        r.unmodelled += [f"--recompute-modules {m}" for m in unknown]
        ops = [op for m in names if m in RECOMPUTE_MODULES for op in RECOMPUTE_MODULES[m]]
        mods_src = f"--recompute-modules {' '.join(names)}" if mods else f"{TC} recompute_modules ['core_attn']"
        if ops == ["score"]:
            put("recompute", "selective", f"{src}, {mods_src} (memsym's selective: the core attention)")
        else:
            put("recompute", "custom:" + ",".join(dict.fromkeys(ops)), f"{src}, {mods_src}")
    else:
        raise launch.err(f"--recompute-granularity {gran!r}: Megatron accepts full, selective")


def _conventions(a: _Args, launch: Launch, r: Resolution, put, known: Tuple[str, ...]):
    """The conventions preset of the transformer implementation and the switches the run's own flags decide."""
    impl, src = a.choice("--transformer-impl", ("transformer_engine", f"{TC} transformer_impl"),
                         ("transformer_engine", "local", "inference_optimized"))
    if impl == "inference_optimized":
        r.unmodelled.append("--transformer-impl inference_optimized")
    te = impl != "local"
    put("conventions", "mcore-te" if te else "mcore", f"{src}: Megatron-Core's allocations"
                                                      + (" with Transformer Engine's kernels" if te
                                                         else ", local spec"))
    dtype, d_src = a.text("--moe-router-dtype", (None, f"{TC} moe_router_dtype None"))
    if dtype not in (None, "fp32"):
        r.unmodelled.append(f"--moe-router-dtype {dtype}")
    put("router_dtype", "fp32" if dtype else "activation", d_src)
    coeffs = a.words("--moe-aux-loss-coeff") if a.has("--moe-aux-loss-coeff") else ()
    c_src = (f"--moe-aux-loss-coeff {' '.join(coeffs)}" if coeffs
             else f"no --moe-aux-loss-coeff ({ARGS} _add_moe_args: 0.0, no load-balancing loss)")
    kinds = a.words("--moe-router-load-balancing-type") or ("aux_loss",)
    try:
        on = any(float(x) > 0 for x in coeffs)
    except ValueError:
        raise launch.err(f"--moe-aux-loss-coeff {' '.join(coeffs)!r}: expected numbers") from None
    aux = {"seq_aux_loss": "seq", "global_aux_loss": "global", "none": "none"}
    if not on or kinds == ("none",):
        put("aux_loss", "none", c_src if not on else "--moe-router-load-balancing-type none")
    elif len(kinds) == 1 and kinds[0] in aux:
        put("aux_loss", aux[kinds[0]], f"--moe-router-load-balancing-type {kinds[0]}, {c_src}")
    else:
        r.unmodelled.append(f"--moe-router-load-balancing-type {' '.join(kinds)}")
    dispatcher, dsrc = a.text("--moe-token-dispatcher-type", ("allgather", f"{TC} moe_token_dispatcher_type"))
    backend, b_src = a.choice("--moe-flex-dispatcher-backend", ("deepep", f"{TC} moe_flex_dispatcher_backend"),
                              ("deepep", "hybridep", "ncclep"))
    if a.has("--moe-enable-deepep"):  # TC __post_init__: moe_enable_deepep sets the backend to deepep
        backend, b_src = "deepep", "--moe-enable-deepep"
    if dispatcher == "alltoall":
        put("experts", "alltoall", dsrc)
    else:
        r.unmodelled.append(f"--moe-token-dispatcher-type {dispatcher}")
    if dispatcher == "flex" and backend == "deepep" and "dispatcher" in known:  # DeepEP's buffers (--memory)
        put("dispatcher", "deepep", f"{dsrc}, {b_src}: DeepEP's buffer (transformer/moe/fused_a2a.py get_buffer)")
    elif dispatcher == "flex" and a.has("--moe-flex-dispatcher-backend"):
        r.unmodelled.append(f"--moe-flex-dispatcher-backend {backend}")
    if te:
        fused = not a.has("--no-rope-fusion")
        put("rope_tables", "shared" if fused else "per-layer",
            f"RoPE fusion on ({ARGS} --no-rope-fusion store_false): TE's fused RoPE, one FP32 table" if fused else
            "--no-rope-fusion: Megatron's unfused apply_rotary_pos_emb casts cos and sin per layer")
    fused = not a.has("--no-bias-swiglu-fusion")
    put("swiglu", "fused" if fused else "offset-copy",
        f"bias_swiglu_fusion ({ARGS} --no-bias-swiglu-fusion store_false)" if fused else "--no-bias-swiglu-fusion")
    if a.has("--cross-entropy-loss-fusion"):
        impl_ce, _ = a.text("--cross-entropy-fusion-impl", ("native", f"{MPC} cross_entropy_fusion_impl"))
        if impl_ce != "native":
            r.unmodelled.append(f"--cross-entropy-fusion-impl {impl_ce}")
    if "offload_activations" in known and a.has("--fine-grained-activation-offloading"):
        mods = [w for m in a.words("--offload-modules") for w in m.strip("[]").replace(",", " ").split()]
        if mods:
            put("offload_activations", ",".join(mods), "--fine-grained-activation-offloading --offload-modules")
