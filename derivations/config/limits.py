"""The domain of every number memsym accepts, as data: each bound the largest value a real model or cluster uses,
with a wide margin, so that every accepted input is computed within seconds and under 1 GiB, within a float64 and a
printed column.  Checked before any work (memsym/commands/argtypes.py apply_limits, a config.json's fields, a
Layout's or Training's validation); a value outside raises ConfigError ``limit.<name>`` naming the limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional

from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Limit:
    """The integers ``low..high`` a quantity may take, and why ``high`` (the largest real value)."""

    name: str
    low: int
    high: int
    why: str

    @property
    def domain(self) -> str:
        return f"{self.low}..{_power(self.high)}"

    def message(self, what: str, value) -> str:
        shown = _show(value)
        return f"{what} must be an integer in {self.domain} ({self.why}), got {shown}"

    def check(self, value, what: Optional[str] = None) -> int:
        """``value`` if it is an integer inside the domain, else ConfigError naming the limit."""
        what = what or self.name
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ConfigError(f"limit.{self.name}", self.message(what, value))
        return value


def _power(n: int) -> str:
    """2^20 for 1048576, 10^4 for 10000, the number otherwise."""
    for base in (2, 10):
        k = round(math.log(n, base)) if n > 0 else 0
        if k >= 4 and base ** k == n:
            return f"{n} = {base}^{k}"
    return str(n)


def _show(value) -> str:
    text = str(value)
    if len(text) > 24:
        return f"{text[:12]}...({len(text)} characters)"
    return text


GPUS = 2 ** 20        # the largest training clusters are ~10^5 GPUs
DIM = 2 ** 24         # the largest hidden or intermediate sizes are ~2^15, vocabularies ~2^18
LAYERS = 10 ** 4      # the deepest released models have ~10^2 layers

#: Command-line options by their argparse ``dest`` (the same name in every command).  A list
#: option (``--mbs 1,2,4`` of search) bounds each entry and, in LIST_LENGTHS, the entries.
OPTIONS: Dict[str, Limit] = {
    "gpus": Limit("gpus", 1, GPUS, "the largest training clusters have ~10^5 GPUs"),
    "dp": Limit("dp", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "tp": Limit("tp", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "pp": Limit("pp", 1, LAYERS, "at most one pipeline stage per layer"),
    "ep": Limit("ep", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "etp": Limit("etp", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "cp": Limit("cp", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "sp": Limit("sp", 1, GPUS, "a parallel degree is at most the number of GPUs"),
    "mbs": Limit("mbs", 1, 2 ** 16, "micro-batches hold at most a few hundred sequences"),
    "seq": Limit("seq", 1, 2 ** 24, "the longest trained contexts are ~2^20 tokens"),
    "microbatches": Limit("microbatches", 1, 2 ** 20, "a step has at most ~10^4 micro-batches"),
    "global_batch": Limit("global_batch", 1, 2 ** 30, "the largest global batches are ~10^5 sequences"),
    "gpus_per_node": Limit("gpus_per_node", 1, 2 ** 10, "nodes hold 4 to 72 GPUs"),
    "nvlink_domain": Limit("nvlink_domain", 1, 2 ** 10, "an NVLink fabric joins 8 (HGX) to 576 (NVL576) GPUs"),
    "cuda_graph_warmup_steps": Limit("cuda_graph_warmup_steps", 0, 2 ** 20, "a training run is ~10^6 steps"),
    "nccl_buffsize": Limit("nccl_buffsize", 1, 2 ** 34, "NCCL_BUFFSIZE is 4 MiB by default; tuned values are MiBs"),
    "vocab_size": Limit("vocab_size", 1, DIM, "the largest vocabularies are ~2^18 (--from-megatron's tokenizer)"),
    "vpp": Limit("vpp", 1, LAYERS, "at most one virtual stage per layer"),
    "stage": Limit("stage", 0, LAYERS - 1, "at most one pipeline stage per layer"),
    "layers_per_stage": Limit("layers_per_stage", 1, LAYERS, "a model has at most 10^4 layers"),
    "zero": Limit("zero", 0, 3, "ZeRO stages 0, 1, 2, 3"),
    "top": Limit("top", 1, 10 ** 6, "rows to list"),
    "rows": Limit("rows", 1, 10 ** 4, "rows to list"),
}
#: Entries of a list option (a search evaluates every combination of its lists).
LIST_LENGTHS: Dict[str, int] = {"mbs": 16, "seq": 16, "zero": 4, "layers_per_stage": LAYERS}
#: A search evaluates every micro-batch size at every sequence length, and keeps every row: at
#: most this many pairs (2^20 GPUs with TP unconstrained, every ZeRO stage and policy, 4 pairs:
#: 0.7 GiB, 9 s; 8 pairs would take 1.3 GiB).  Split a larger grid into several searches.
SEARCH_GRID = 4
#: List options that are sets of values to try (search): a value typed twice is refused.
SET_OPTIONS = ("mbs", "seq", "zero")
#: Any integer typed on the command line: at most this many digits (checked before it is converted).
MAX_DIGITS = 18
#: Any argument typed on the command line (a formula, a path, a list): at most this many characters.
MAX_ARG_CHARS = 2 ** 16
#: Memory per GPU (--hbm): the largest GPUs have ~2^38 bytes.
HBM = Limit("hbm", 1, 2 ** 50, "the largest GPUs have ~2^38 bytes")
#: Routing imbalance F (--imbalance): typed as a decimal of at most this many characters, at most IMBALANCE.
MAX_NUMBER_CHARS = 32
IMBALANCE = 10 ** 6
#: How the command line reads a typed integer (ASCII digits, an optional sign) and the imbalance F (a
#: decimal whose exponent has at most two digits, or a fraction): fullmatch after str.strip().  The
#: calculator page (memsym page) reads its fields with the same patterns.
INT_PATTERN = r"[+-]?[0-9]+"
DECIMAL_PATTERN = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]{1,2})?|[0-9]+/[0-9]+"

#: config.json: at most this many bytes read, nested at most this deep (released configs: ~2 KiB, depth 3).
CONFIG_BYTES = 4 * 2 ** 20
CONFIG_DEPTH = 32
#: config.json: an integer of more than this many characters (its sign excluded) is refused as it is read.
CONFIG_DIGITS = 30

#: config.json fields (Hugging Face names).
FIELDS: Dict[str, Limit] = {
    "hidden_size": Limit("hidden_size", 1, DIM, "the largest hidden sizes are ~2^15"),
    "intermediate_size": Limit("intermediate_size", 1, DIM, "the largest FFN sizes are ~2^16"),
    "moe_intermediate_size": Limit("moe_intermediate_size", 1, DIM, "the largest expert sizes are ~2^14"),
    "num_hidden_layers": Limit("num_hidden_layers", 1, LAYERS, "the deepest models have ~10^2 layers"),
    # GLM-5's shared indexer layers (transformers models/glm_moe_dsa, GlmMoeDsaConfig.__post_init__)
    "index_topk_freq": Limit("index_topk_freq", 1, LAYERS, "at most the layers"),
    "index_skip_topk_offset": Limit("index_skip_topk_offset", 0, LAYERS, "at most the layers"),
    "num_attention_heads": Limit("num_attention_heads", 1, 2 ** 16, "the most heads are ~2^8"),
    "kv_lora_rank": Limit("kv_lora_rank", 1, DIM, "compression ranks are ~2^9"),
    "q_lora_rank": Limit("q_lora_rank", 1, DIM, "compression ranks are ~2^11"),
    "qk_nope_head_dim": Limit("qk_nope_head_dim", 1, DIM, "head dimensions are ~2^7"),
    "qk_rope_head_dim": Limit("qk_rope_head_dim", 1, DIM, "head dimensions are ~2^6"),
    "v_head_dim": Limit("v_head_dim", 1, DIM, "head dimensions are ~2^7"),
    "n_routed_experts": Limit("n_routed_experts", 1, 2 ** 20, "the most routed experts are ~2^9"),
    "num_experts_per_tok": Limit("num_experts_per_tok", 1, 2 ** 20, "at most the routed experts"),
    "vocab_size": Limit("vocab_size", 1, DIM, "the largest vocabularies are ~2^18"),
    "n_shared_experts": Limit("n_shared_experts", 0, 2 ** 10, "models share at most a few experts"),
    "first_k_dense_replace": Limit("first_k_dense_replace", 0, LAYERS, "at most the layers"),
    "moe_layer_freq": Limit("moe_layer_freq", 1, LAYERS, "at most the layers"),
    "num_nextn_predict_layers": Limit("num_nextn_predict_layers", 0, 2 ** 10, "released models have 1"),
    "weight_block_size": Limit("weight_block_size", 1, DIM, "FP8 blocks are 128 x 128"),
    "index_n_heads": Limit("index_n_heads", 1, 2 ** 16, "DSA indexers have ~2^6 heads"),
    "index_head_dim": Limit("index_head_dim", 1, DIM, "head dimensions are ~2^7"),
    "index_topk": Limit("index_topk", 1, 2 ** 40, "DSA keeps ~2^11 tokens per query"),
    # DeepSeek-V4 (transformers models/deepseek_v4, DeepseekV4Config)
    "head_dim": Limit("head_dim", 1, DIM, "head dimensions are ~2^9"),
    "o_groups": Limit("o_groups", 1, 2 ** 16, "output projections have ~2^4 groups"),
    "o_lora_rank": Limit("o_lora_rank", 1, DIM, "output ranks are ~2^10"),
    "hc_mult": Limit("hc_mult", 1, 2 ** 8, "hyper-connections keep ~4 streams"),
    "hc_sinkhorn_iters": Limit("hc_sinkhorn_iters", 1, 2 ** 10, "Sinkhorn runs ~20 iterations"),
    "sliding_window": Limit("sliding_window", 1, 2 ** 40, "sliding windows are ~2^7 tokens"),
    "num_hash_layers": Limit("num_hash_layers", 0, LAYERS, "at most the layers"),
}


def option(dest: str) -> Optional[Limit]:
    """The limit of the command-line option stored in ``dest``, if it has one."""
    return OPTIONS.get(dest)

