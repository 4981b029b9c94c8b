"""Ground truth per tensor (recorded in ``paper/traces/``): trace real implementations on CPU.

:mod:`.recorder` records every storage autograd saves for backward and attributes it to a layer and sublayer;
:mod:`.hf` (transformers) and :mod:`.mcore` (Megatron-Core, local layer spec) build and run a model from a
config; :mod:`.inputs` reads and checks everything before torch is imported; :mod:`.records` writes a
measurement as TOML.  torch, transformers and megatron-core are the optional extra ``memsym[trace]`` (pinned
there); nothing here imports them at module level.
"""
from __future__ import annotations
import importlib.util

INSTALL_HINT = "pip install 'memsym[trace]'"

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
