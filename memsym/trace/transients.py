"""Transients at the peak, measured on CPU: the cross-entropy backward's cast (``--ce-backward cast``).

Megatron-Core's vocab-parallel cross-entropy (unfused and fused) keeps the FP32 softmax, reuses it as the logits'
FP32 gradient and casts that to the logits' dtype while it is held.  :func:`measure` runs both on CPU tracking every
storage; ``python -m memsym.trace.transients`` prints paper/transients/ce-backward.toml.
"""
from __future__ import annotations

import weakref

from . import DATA
from .mcore import one_rank
from .records import toml_table, toml_value

#: The measured shapes: tokens b s, vocabulary v (TP = 1), hidden h; BF16 logits.
SHAPE = {"b": 2, "s": 256, "v": 4096, "h": 64}
NOTE = DATA["notes"]["ce_backward"]


def measure(b: int = SHAPE["b"], s: int = SHAPE["s"], v: int = SHAPE["v"], h: int = SHAPE["h"]) -> dict:
    """{path: {held_after_forward, forward_peak_above, backward_peak_above}} in bytes, for the
    unfused and the fused (native) cross-entropy of BF16 logits [s, b, v]."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    ps = one_rank()
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    live, state = {}, {"cur": 0, "peak": 0}

    def track(t):
        st = t.untyped_storage()
        key, n = st.data_ptr(), st.nbytes()
        if n == 0 or key in live:
            return
        live[key] = n
        state["cur"] += n
        state["peak"] = max(state["peak"], state["cur"])

        def freed(k=key, n=n):
            if live.pop(k, None) is not None:
                state["cur"] -= n
        weakref.finalize(st, freed)

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor):
                    track(o)
            return out

    paths = {"unfused": lambda lg, t: vocab_parallel_cross_entropy(lg, t),
             "fused-native": lambda lg, t: fused_vocab_parallel_cross_entropy(
                 lg, t, ps.get_tensor_model_parallel_group())}
    out = {}
    for name, fn in paths.items():
        torch.manual_seed(0)
        x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(v, h, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, v, (s, b))
        live.clear()
        state.update(cur=0, peak=0)
        with Track():
            logits = x @ w.t()
            loss = fn(logits, target)
            del logits
            held = state["cur"]
            fwd_peak, state["peak"] = state["peak"], state["cur"]
            loss.sum().backward()
        out[name] = {"held_after_forward": held, "forward_peak_above": fwd_peak - held,
                     "backward_peak_above": state["peak"] - held}
    return out


def record() -> str:
    """The TOML record of :func:`measure` (paper/transients/ce-backward.toml)."""
    import megatron.core
    import torch
    got = measure()
    lines = ["# measured by: python -m memsym.trace.transients (memsym/trace/transients.py)",
             f"command = {toml_value('python -m memsym.trace.transients')}", f"note = {toml_value(NOTE)}"]
    lines += toml_table("shape", {**SHAPE, "logits_dtype": "bf16"}) + toml_table("versions", {
        "megatron-core": megatron.core.__version__, "torch": torch.__version__.split("+")[0]})
    for name, vals in got.items():
        lines += toml_table(f'measured."{name}"', vals)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(record(), end="")
