"""A torchtitan job config (the TOML ``CONFIG_FILE`` of ``run_train.sh``) read as data (:mod:`tomllib`, bounded as a
launch file) and mapped onto memsym's options, with torchtitan's own default for a key the file does not give
(:data:`DEFAULTS`, ``_Keys.get``).  The model: ``deepseek_v3`` with a flavor of ``deepseekv3_configs``, a memsym
preset when equal field by field.  Sources, pytorch/torchtitan at 99fee810b7e253273ed8d1e10eb6c5f60ba69eff
(2025-10-02; torchtitan replaced its TOML job configs at 9810191, #2386): JC torchtitan/config/job_config.py, PD
torchtitan/distributed/parallel_dims.py, PAR torchtitan/models/deepseek_v3/infra/parallelize.py, AC
torchtitan/distributed/activation_checkpoint.py, DS torchtitan/models/deepseek_v3/__init__.py, model/args.py, moe.py.

HSDP (replicate R > 1, shard S > 1): a GPU's memory is its FSDP group's, so memsym counts one group (--dp S --zero 3,
a given global batch divided by R).  DDP (R > 1, S = 1, no CP, no EP): --dp R --zero 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from symbolic import tomlfile
from symbolic.errors import ConfigError, did_you_mean
from symbolic.jsonfile import Bounds, shown

from derivations.config.launch import read_text
from derivations.config.limits import CONFIG_BYTES
from derivations.config.hfconfig import read_json
from derivations.config.megatron import Resolution
from derivations.config.presets import PRESET_NAMES, preset_path

REV = "99fee810"
JC, PD, PAR, AC, DS = ("job_config.py", "parallel_dims.py", "deepseek_v3/infra/parallelize.py",
                       "activation_checkpoint.py", "deepseek_v3/__init__.py deepseekv3_configs")

with tomlfile.package_data(Path(__file__).with_name("torchtitan_keys.toml")) as _KEYS:
    #: deepseekv3_configs (DS): the memory-relevant model arguments of each flavor (torchtitan_keys.toml)
    FLAVORS: Dict[str, Dict[str, object]] = {k: dict(zip(_KEYS["args"], v)) for k, v in _KEYS["flavors"].items()}
    #: Sections and keys that change none of the memory memsym models (read by no mapping, never warned about).
    IGNORED_SECTIONS = frozenset(_KEYS["ignored_sections"])
    IGNORED = frozenset(_KEYS["ignored"].split())
    #: JobConfig's field names by the dotted path of their table ("": the sections); ConfigManager._dict_to_dataclass
    #: refuses any other name at every level (torchtitan/config/manager.py)
    FIELDS: Dict[str, Tuple[str, ...]] = {k: tuple(v.split()) for k, v in _KEYS["fields"].items()}
    #: JobConfig's default of each key memsym reads (job_config.py)
    DEFAULTS: Dict[str, object] = dict(_KEYS["defaults"])
    #: a flavor's config.json fields: the flavor's arg, or {value, origin} of torchtitan's fixed choice
    MODEL_FIELDS: Dict[str, object] = dict(_KEYS["model_fields"])
_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}


#: a job config's bounds beyond a launch file's (derivations/config/launch.py read_text): its tables nest two deep,
#: its integers are degrees, steps and sizes
JOB_CONFIG = Bounds(max_bytes=CONFIG_BYTES, max_depth=8, max_digits=30, name="TOML job config", nests=2,
                    reading="the job config")


def err(path: str, message: str) -> ConfigError:
    return ConfigError("from-torchtitan", f"{path}: {message}")


def read_job_config(path: str) -> Dict[str, object]:
    """The job config's tables (``tomllib``: data only; size, file kind and encoding checked as a launch file's)."""
    text = read_text(str(path), "from-torchtitan", "a torchtitan job config")
    data = tomlfile.loads(text, str(path), JOB_CONFIG, lambda p, _, message: err(p, message))
    for section, table in data.items():
        if not isinstance(table, dict):
            raise err(path, f"{section} = {table!r}: a job config's top level holds tables ([{section}])")
    _check_fields(path, "", data)
    return data


def _check_fields(path: str, where: str, table: Dict[str, object]) -> None:
    """Every name of ``table`` (the job config's table at dotted path ``where``) a field of JobConfig's, as
    ConfigManager._dict_to_dataclass requires at every level (torchtitan/config/manager.py)."""
    for key, value in table.items():
        if key not in FIELDS[where]:
            what = f"[{shown(key)}] is not a section" if not where else f"[{where}] {shown(key)} is not a field"
            raise err(path, f"{what} of torchtitan's JobConfig (its ConfigManager refuses it: {JC})"
                            f"{did_you_mean(key, FIELDS[where])}: one of {', '.join(sorted(FIELDS[where]))}")
        if isinstance(value, dict) and f"{where}.{key}".lstrip(".") in FIELDS:
            _check_fields(path, f"{where}.{key}".lstrip("."), value)


class _Keys:
    """The config's keys read one at a time (each read key is remembered: the rest are warned about)."""

    def __init__(self, path: str, data: Dict[str, object]):
        self.path, self.data, self.used = path, data, set()

    def get(self, key: str) -> Tuple[object, str]:
        """The key's value, else JobConfig's default (:data:`DEFAULTS`, named as its Section.field), and its source."""
        section, name = key.split(".", 1)
        self.used.add(key)
        table = self.data.get(section, {})
        if name in table:
            return table[name], f"[{section}] {name} = {table[name]!r}"
        where = "".join(w.title() for w in section.split("_")) + "." + name
        return DEFAULTS[key], f"torchtitan default {DEFAULTS[key]!r} ({JC} {where})"

    def int(self, key: str, low: int = 1) -> Tuple[int, str]:
        val, src = self.get(key)
        if isinstance(val, bool) or not isinstance(val, int) or not (low <= val <= 10 ** 9):
            raise err(self.path, f"{key} = {val!r}: expected an integer >= {low}")
        return val, src

    def choice(self, key: str, choices) -> Tuple[str, str]:
        val, src = self.get(key)
        if val not in choices:
            raise err(self.path, f"{key} = {val!r}: torchtitan accepts {', '.join(map(repr, choices))}")
        return val, src

    def rest(self):
        """Every key the mappings did not read (section.key; a nested table by its dotted path)."""
        def walk(prefix, table):
            for k, v in table.items():
                if isinstance(v, dict):
                    yield from walk(f"{prefix}.{k}", v)
                else:
                    yield f"{prefix}.{k}", v
        for section, table in self.data.items():
            if section not in IGNORED_SECTIONS:
                yield from ((k, v) for k, v in walk(section, table) if k not in self.used and k not in IGNORED)


def resolve(data: Dict[str, object], path: str, gpus: Optional[int] = None, dp: Optional[int] = None,
            build_model: bool = True, known: Tuple[str, ...] = ()) -> Resolution:
    """memsym's options of a job config; ``gpus``/``dp`` typed: the world size where the file's degrees lack it."""
    k, r = _Keys(path, data), Resolution()
    put = r.put

    put("conventions", "torchtitan", f"derivations/config/convention_presets/torchtitan.toml (torchtitan@{REV}: "
                                     "FSDP2, op-level selective checkpointing, compiled loss)")

    flex = True  # a typed --model: the flavor's attention unknown, FlexAttention taken (every DeepSeek flavor's)
    if build_model:
        flex = _model(k, r, put)
    else:
        k.get("model.name"), k.get("model.flavor")
    _layout(k, r, put, gpus, dp)
    _training(k, r, put, flex)
    memory = [(key, v) for key, v in k.rest() if not key.startswith("compile.")]
    converters = data.get("model", {}).get("converters", [])
    comp = k.data.get("compile", {})
    if "enable" in comp and not isinstance(comp["enable"], bool):
        raise err(k.path, f"compile.enable = {comp['enable']!r}: expected true or false")
    compiled = comp.get("enable") is True  # JC Compile; PAR apply_compile (model), the loss compiled (train.py)
    components = comp.get("components", ["model", "loss"]) if compiled else []
    if compiled and components != ["loss"]:
        memory.insert(0, ("compile.enable", f"True, components {components!r} (torch.compile of the model: "
                                            "fused kernels, fewer saved intermediates)"))
    if "loss" in components:
        r.notes.append("compile.components has 'loss': the compiled loss keeps the B_a logits and per-row FP32 "
                       "statistics, not an FP32 softmax (--conventions torchtitan: --head-state torchtitan)")
    else:
        put("head_state", "paper", "an eager loss (components/loss.py build_cross_entropy_loss compiles it only with "
                                   "compile.enable and 'loss' in compile.components; JC Compile.enable False): "
                                   "cross_entropy of pred.float() keeps the FP32 log-softmax, and train.py holds the "
                                   "B_a logits pred until the loss is computed: the paper's head state")
    # [quantize.*] takes effect only through model.converters (parallelize.py; job_config.py Model.converters)
    if not converters:
        memory = [(key, v) for key, v in memory if not key.startswith("quantize.")]
    r.unmodelled += [f"{key} = {v if key == 'compile.enable' else repr(v)}" for key, v in memory]
    return r


def _model(k: _Keys, r: Resolution, put) -> bool:
    """The flavor's model (a preset or config fields); returns its use_flex_attn."""
    name, n_src = k.get("model.name")
    flavor, f_src = k.get("model.flavor")
    if name != "deepseek_v3":
        raise err(k.path, f"model.name = {name!r}: memsym reads torchtitan's deepseek_v3 (DeepSeek-V3 family); "
                          "give --model for another config")
    if flavor not in FLAVORS:
        raise err(k.path, f"model.flavor = {flavor!r}: deepseek_v3's flavors are {', '.join(FLAVORS)} ({DS})")
    a = FLAVORS[flavor]
    fields = {f: x["value"] if isinstance(x, dict) else a[x] for f, x in MODEL_FIELDS.items()}
    fields["q_lora_rank"] = fields["q_lora_rank"] or None  # 0: no query compression
    src = f"{n_src}, {f_src}: {DS}[{flavor!r}]"
    for preset in PRESET_NAMES:
        p = read_json(preset_path(preset))
        if all(p.get(f, 0 if f == "num_nextn_predict_layers" else None) == v
               for f, v in fields.items() if f != "model_type"):
            put("model", preset, f"{src}, equal to the preset field by field (memory-relevant args)")
            break
    else:
        r.model = fields
        r.model_origin = {f: x.get("origin", src) if isinstance(x, dict) else src for f, x in MODEL_FIELDS.items()}
        r.model_origin.update({"first_k_dense_replace": f"{src} n_dense_layers",
                               "q_lora_rank": f"{src} q_lora_rank {a['q_lora_rank']} (0: none)"})
    r.notes.append("torchtitan's MoE keeps expert_bias and tokens_per_expert buffers (moe.py: num_experts FP32 each "
                   "per MoE layer): not counted")
    put("attention", "flash", f"{src} use_flex_attn {a['use_flex_attn']} (FlexAttention or SDPA: fused, no s^2 "
                              "scores tensor)")
    return bool(a["use_flex_attn"])


def _layout(k: _Keys, r: Resolution, put, gpus: Optional[int], dp: Optional[int]) -> None:
    rep, rep_src = k.int("parallelism.data_parallel_replicate_degree")
    shard, sh_src = k.get("parallelism.data_parallel_shard_degree")
    if shard != -1:
        shard, sh_src = k.int("parallelism.data_parallel_shard_degree")
    tp, tp_src = k.int("parallelism.tensor_parallel_degree")
    pp, pp_src = k.int("parallelism.pipeline_parallel_degree")
    cp, cp_src = k.int("parallelism.context_parallel_degree")
    ep, ep_src = k.int("parallelism.expert_parallel_degree")
    etp, etp_src = k.int("parallelism.expert_tensor_parallel_degree")
    size = rep * tp * pp * cp
    if gpus is not None:
        world, w_src = gpus, f"--gpus {gpus}"
    elif shard != -1:
        world, w_src = size * shard, "the product of the file's degrees"
    elif dp is not None:
        world, w_src = dp * tp * pp * cp, "typed --dp"
    else:
        raise err(k.path, "data_parallel_shard_degree is -1 (the rest of the world, torchtitan's default): give "
                          "--gpus N (the job's GPU count)")
    if shard == -1:  # PD _validate: dp_shard = world_size // (dp_replicate cp tp pp)
        if world % size:
            raise err(k.path, f"{w_src}: {world} GPUs is not a multiple of replicate {rep} x CP {cp} x TP {tp} x "
                              f"PP {pp} ({PD} _validate)")
        shard, sh_src = world // size, f"{sh_src}: {world} / (replicate {rep} CP {cp} TP {tp} PP {pp}) ({PD})"
    elif size * shard != world:
        raise err(k.path, f"replicate {rep} x shard {shard} x CP {cp} x TP {tp} x PP {pp} = {size * shard} != "
                          f"{w_src} {world} ({PD} _validate)")
    if ep > 1:  # PD _validate
        if etp not in (tp, 1):
            raise err(k.path, f"expert_tensor_parallel_degree {etp}: torchtitan supports ETP = TP or 1 ({PD})")
        unit = cp if etp == tp else cp * tp
        if ep % unit or (shard * unit) % ep:
            raise err(k.path, f"expert_parallel_degree {ep} must be a multiple of {unit} dividing {shard * unit} "
                              f"(dp_shard x {'CP' if etp == tp else 'CP x TP'}; {PD} _validate)")
    else:
        etp, etp_src = tp, ("EP 1: the experts are tensor-parallel like the rest (parallelize.py apply_moe_ep_tp); "
                            f"{etp_src}")
    if rep > 1 and (shard > 1 or cp > 1 or ep > 1):
        dp_, zero, z_src = shard, 3, (f"HSDP: {rep} replicas of an FSDP group of {shard} ({rep_src}; parallelize.py "
                                      "dp_mesh); memsym counts one group (a GPU's memory is its group's)")
        r.notes.append(f"HSDP: --dp {shard} is one replica group of {rep}; the job has {world} GPUs")
    elif rep > 1:
        dp_, zero, z_src = rep, 0, f"DDP over {rep} ({rep_src}; parallelize.py apply_ddp): nothing sharded"
    else:
        dp_, zero = shard, 3 if (shard > 1 or cp > 1 or ep > 1) else 0
        z_src = ("FSDP2 fully_shard over dp_shard x CP (parallelize.py apply_fsdp): parameters, gradients and "
                 f"optimizer states sharded ({sh_src})" if zero else "no data parallelism: nothing sharded")
    r.world = world
    put("dp", dp_, f"{sh_src}; world {world} ({w_src})" if rep == 1 else z_src)
    put("tp", tp, tp_src), put("pp", pp, pp_src), put("ep", ep, ep_src), put("etp", etp, etp_src), put("cp", cp, cp_src)
    put("sp", tp, f"{PAR} apply_non_moe_tp: SequenceParallel norms whenever TP > 1 (SP = TP)")
    put("zero", zero, z_src)
    if zero == 3:
        raf, raf_src = k.choice("parallelism.fsdp_reshard_after_forward", ("default", "always", "never"))
        if raf == "never" or (raf == "default" and pp > 1):
            r.unmodelled.append(f"fsdp_reshard_after_forward {raf!r}: unsharded parameters kept from forward to "
                                "backward (parallelize.py apply_fsdp)")
        r.notes.append(f"FSDP2 ({raf_src}): --conventions torchtitan's --rank fsdp2 counts the running and the "
                       "prefetched block all-gathered, the backward's unsharded gradients and reduce-scatter input "
                       "(derivations/assembly/fsdp.py)")
    else:
        k.get("parallelism.fsdp_reshard_after_forward")
    r.dp_layout = (rep, shard)


def _training(k: _Keys, r: Resolution, put, flex: bool) -> None:
    local, l_src = k.int("training.local_batch_size")
    seq, s_src = k.int("training.seq_len")
    gbs, g_src = k.get("training.global_batch_size")
    pp = int(r.options["pp"])
    if pp > 1:
        mbs, m_src = k.int("parallelism.pipeline_parallel_microbatch_size")
        sched, sc_src = k.get("parallelism.pipeline_parallel_schedule")
        if local % mbs:
            raise err(k.path, f"local_batch_size {local} is not a multiple of the PP micro-batch size {mbs}")
        if sched != "1F1B":
            r.unmodelled.append(f"pipeline_parallel_schedule {sched!r} (counted as 1F1B)")
        put("mbs", mbs, m_src)
        put("schedule", "1f1b", sc_src)
    else:
        k.get("parallelism.pipeline_parallel_schedule"), k.get("parallelism.pipeline_parallel_microbatch_size")
        put("mbs", local, l_src)
    put("seq", seq, s_src)
    rep, shard = r.dp_layout
    if gbs != -1 and (isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1 or gbs % (local * rep * shard)):
        raise err(k.path, f"global_batch_size = {gbs!r}: expected -1 or a multiple of local_batch_size x DP "
                          f"({local * rep * shard})")
    if gbs != -1 or pp > 1:  # memsym's DP is one replica group under HSDP: its share of the batch
        whole = gbs if gbs != -1 else local * rep * shard
        put("global_batch", whole * int(r.options["dp"]) // (rep * shard),
            g_src if gbs != -1 else f"{g_src}: local x DP")
    _recompute(k, r, put, flex)
    _precision(k, r, put)


def _recompute(k: _Keys, r: Resolution, put, flex: bool) -> None:
    mode, m_src = k.choice("activation_checkpoint.mode", ("none", "selective", "full"))
    opt, o_src = k.get("activation_checkpoint.selective_ac_option")
    if mode != "selective":
        put("recompute", mode, f"{m_src} ({AC} apply_ac)")
    elif opt == "op":
        put("recompute", "selective", f"{m_src}, {o_src}: op-level SAC ({AC} _apply_op_sac: saves the outputs of "
                                      "the save list, every other mm recomputed), as --conventions torchtitan's "
                                      "--selective torchtitan-op (derivations/activations/op_sac.py)")
        comp = k.data.get("compile", {})
        if not flex or (comp.get("enable") is True and "model" in comp.get("components", ["model", "loss"])):
            r.unmodelled.append("selective_ac_option 'op' on whole blocks (the model compiled or no FlexAttention: "
                                f"{AC} _apply_op_sac; the attention's wq, wkv_b and attention outputs saved, the "
                                "norms recomputed): counted as torchtitan-op's FlexAttention path")
    elif isinstance(opt, str) and opt.isdigit() and int(opt) >= 1:
        if int(opt) == 1:
            put("recompute", "full", f"{m_src}, {o_src}: every layer checkpointed ({AC} _apply_layer_sac)")
        else:
            put("recompute", "none", f"{m_src}, {o_src}: every {opt}th layer checkpointed, counted as none")
            r.unmodelled.append(f"selective_ac_option {opt!r}: every {opt}th block fully checkpointed (memsym "
                                "checkpoints all or none; counted as none, an over-count)")
    else:
        raise err(k.path, f"activation_checkpoint.selective_ac_option = {opt!r}: 'op' or a positive integer ({AC})")


def _precision(k: _Keys, r: Resolution, put) -> None:
    dtype, d_src = k.choice("training.dtype", tuple(_DTYPES))
    param, p_src = k.choice("training.mixed_precision_param", tuple(_DTYPES))
    red, r_src = k.choice("training.mixed_precision_reduce", ("float32",))
    fsdp = r.options["zero"] == "3"
    if k.get("training.enable_cpu_offload")[0]:
        r.unmodelled.append("training.enable_cpu_offload true (FSDP's shards on the CPU)")
    name, n_src = k.get("optimizer.name")
    if name not in ("AdamW", "Adam"):
        r.unmodelled.append(f"optimizer.name {name!r} (memsym counts Adam's two moments)")
    if k.get("optimizer.early_step_in_backward")[0]:
        r.unmodelled.append("optimizer.early_step_in_backward true (gradients freed per parameter)")
    master = _DTYPES[dtype]
    weight = _DTYPES[param] if fsdp else master
    w_src = (f"{p_src}: FSDP's param_dtype (parallelize.py apply_fsdp)" if fsdp
             else f"{d_src} (no FSDP: autocast, not modelled)")
    put("weight_dtype", weight, w_src)
    put("grad_dtype", master, f"{d_src}: the sharded gradients of the {master} parameters; {r_src} reduce")
    put("master_dtype", master, f"{d_src}: the sharded parameters the optimizer steps")
    put("optimizer_dtype", master, f"{d_src}: Adam's moments like their parameters ({n_src})")
    put("act_dtype", weight, w_src + " (the activations)")
