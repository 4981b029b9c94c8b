"""The tables of derivations/config/megatron.py, read from megatron_flags.toml (data: which Megatron-LM flags change no
memory memsym models, and the names Megatron gives what memsym maps)."""
from __future__ import annotations

from pathlib import Path

from symbolic import tomlfile

with tomlfile.package_data(Path(__file__).with_name("megatron_flags.toml")) as _DATA:
    IGNORED = frozenset(_DATA["ignored"].split())
    GPT2_VOCAB = _DATA["gpt2_vocab"]
    KNOWN_TOKENIZER_MODELS = {k: tuple(v) for k, v in _DATA["known_tokenizer_models"].items()}
    RECOMPUTE_MODULES = {k: tuple(v) for k, v in _DATA["recompute_modules"].items()}
    FSDP_ZERO = _DATA["fsdp_zero"]
DTYPE_NAMES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
#: The Megatron-LM sources the mappings cite (megatron/training/, megatron/core/transformer/, megatron/core/).
ARGS, TC, MPC = "arguments.py", "transformer_config.py TransformerConfig", "model_parallel_config.py"
OVERLAP_FLAGS = tuple(tuple(x) for x in _DATA["overlap_flags"])
