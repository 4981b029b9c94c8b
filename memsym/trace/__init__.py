"""Ground truth per tensor (``paper/traces/``): real implementations traced on CPU (:mod:`.hf`, :mod:`.mcore`),
their saves recorded (:mod:`.recorder`), inputs checked before torch is imported (:mod:`.inputs`), written as TOML
(:mod:`.records`).  torch, transformers and megatron-core are the extra ``memsym[trace]``, never imported here."""
from __future__ import annotations
import importlib.util

INSTALL_HINT = "pip install 'memsym[trace]'"

#: Largest config traced on CPU: parameters and the biggest saved score tensor (b n_h s^2 elements).
MAX_PARAMS = 50_000_000
MAX_SCORE_ELEMENTS = 64 * 1024 * 1024
MAX_TOKENS = 16384

#: ``--fake`` allocates nothing: bounded by time and the real routing tensors (b s N_r x N) instead.
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
