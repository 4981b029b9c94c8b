"""Ground truth per tensor (recorded in ``paper/traces/``): trace real implementations on CPU.

:mod:`memsym.trace.recorder` records every tensor autograd saves for backward (de-duplicated
by storage object), attributes it to the layer and sublayer whose operation saved it;
:mod:`memsym.trace.hf` builds Hugging Face transformers' ``DeepseekV3ForCausalLM`` from a
config and runs it.  torch and transformers are the optional extra ``memsym[trace]``;
nothing here imports them at module level.  :mod:`memsym.trace.inputs` reads the config once
(estimate's bounded reader and validation) and checks the options before either is imported;
:mod:`memsym.trace.records` writes a measurement as TOML (every user string escaped).

Megatron-Core (``--framework mcore``): :mod:`memsym.trace.mcore` builds ``GPTModel`` with the
local layer spec (megatron-core 0.16.1, the newest release whose metadata accepts Python 3.11)
after plumbing-only patches, and the ``mcore`` preset predicts it (``--kernels te``: Transformer
Engine's kernels, from their sources).  Megatron's ``layernorm``/``mla_up_proj`` recomputation
(output-discarding checkpoints) and ``moe_act`` (grouped GEMM only) have no memsym operator yet.
"""
from __future__ import annotations
import importlib.util

INSTALL_HINT = "pip install 'memsym[trace]'"

#: The versions the records in paper/traces/ were measured with (pyproject's trace extra pins them).
PINNED = {"torch": "2.13.0", "transformers": "5.24.0", "megatron-core": "0.16.1"}

#: Largest config traced on CPU: parameters and the biggest saved score tensor (b n_h s^2 elements).
MAX_PARAMS = 50_000_000
MAX_SCORE_ELEMENTS = 64 * 1024 * 1024
MAX_TOKENS = 16384

#: ``--fake`` (memsym/trace/fake.py) allocates no activation, so MAX_PARAMS and the others do not
#: apply; what bounds it is time (a forward op by op, N experts each a loop) and the real routing
#: tensors beside the fake ones (b s N_r x N of them): decoder layers and tokens.
MAX_FAKE_LAYERS = 4
MAX_FAKE_TOKENS = 32768


def missing(framework: str = "transformers"):
    """The name of the first package the trace extra needs that is not installed, or None."""
    need = ["torch", "transformers"] if framework == "transformers" else ["torch", "megatron.core"]
    for mod in need:
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except ModuleNotFoundError:
            return mod
    return None
