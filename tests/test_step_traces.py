"""The step peak (memsym trace --step, memsym/trace/step.py) against torch's allocations.

Fast: toy modules whose every allocation is counted here by hand (the bytes of each tensor torch makes, freed
when its last holder lets go), not by memsym: the profiled step's peak, the op and autograd node running at it,
the bytes at the end of the forward and what the forward's saves hold of them.  The step records
(paper/traces/*-step.toml, [measured.step]) are consistent with themselves and with their [measured] section.
Slow (marker ``trace``): two records measured again equal their [measured.step] exactly.
"""
import os

import pytest

from memsym.trace import records

STEP_RECORDS = [r for r in records.load_all() if r["settings"].get("step")]
IDS = [r["_file"] for r in STEP_RECORDS]


def _have_torch():
    from memsym.trace import missing
    return missing("transformers") is None


def _torch():
    if not _have_torch():
        if os.environ.get("MEMSYM_REQUIRE_TRACE"):
            raise AssertionError("MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed")
        pytest.skip("needs pip install 'memsym[trace]'")
    import torch
    return torch


def _step(torch, model, make_inputs):
    from memsym.trace import step
    from memsym.trace.recorder import Recorder

    def forward(m, *inputs):
        with Recorder(m, hold=False) as rec:
            loss = m(*inputs)
        return loss, rec
    return step.run(model, make_inputs, forward, lambda m: [p.grad for p in m.parameters() if p.grad is not None])


def test_the_step_peak_of_a_toy_is_its_hand_count():
    """x [4, 16] FP32 (256 B) times a parameter, exp, sum.  Forward: x 256 (inputs), x*w 256 (mul saves x, the
    parameter's gradient needs it), exp 256 (exp saves its output), x*w freed once exp ran, the loss 4: 516 at the
    end, of which the saves hold 512 (x, exp's output) and the loss 4 is held by the caller.  Backward: the seed
    gradient (ones, 4), ExpBackward0's grad * output (256) while the seed, exp's output, x and the loss are alive:
    the peak 776; MulBackward0's grad * x is the parameter's gradient (256, left out)."""
    torch = _torch()

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4, 16))

        def forward(self, x):
            return torch.exp(x * self.w).sum()

    got = _step(torch, Toy(), lambda: (torch.randn(4, 16),))
    assert got["peak"] == 4 + 256 + 256 + 256 + 4 == 776
    assert (got["at"]["phase"], got["at"]["node"], got["at"]["op"], got["at"]["bytes"]) == (
        "backward", "ExpBackward0", "aten::mul", 256)
    assert got["end_of_forward"] == 516 and got["saved_at_end_of_forward"] == 512
    assert [(g["op"], g["bytes"]) for g in got["unsaved_at_end_of_forward"]] == [("aten::sum", 4)]
    assert got["forward_peak"] == 256 * 3
    assert got["left_out"]["gradients_at_end"] == 256
    assert sum(h["bytes"] for h in got["held_at_peak"]) == 776
    assert {(h["what"], h["bytes"]) for h in got["held_at_peak"]} == {("saved", 512), ("unsaved", 4),
                                                                       ("backward", 260)}


def test_a_leafs_grad_made_in_the_backward_is_an_activation_gradient():
    """torch's reentrant checkpoint (as Megatron-Core's CheckpointFunction) backpropagates a detached copy of its
    input and returns that leaf's ``.grad``: torch's profiler calls it GRADIENT, but it is the activation's gradient
    and counts (a module run inside the backward is a recomputation).  Forward: x 256, x*w 256 (saved by the checkpoint), exp's output 256 (nobody saves it: freed after
    the sum), the loss 4: 516 at the end.  Backward: the seed 4, exp recomputed 256, its gradient 256 (the leaf's
    .grad): the peak 4 + 256 + 256 + 4 + 256 + 256 = 1032 (776 if the leaf's .grad were left out)."""
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    class Exp(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x)

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4, 16))
            self.exp = Exp()

        def forward(self, x):
            return checkpoint(self.exp, x * self.w, use_reentrant=True, preserve_rng_state=False).sum()

    got = _step(torch, Toy(), lambda: (torch.randn(4, 16),))
    assert got["end_of_forward"] == 516 and got["saved_at_end_of_forward"] == 512
    assert got["peak"] == 1032
    assert (got["at"]["node"], got["at"]["op"]) == ("ExpBackward0", "aten::mul")
    assert any("1 other allocations torch calls GRADIENT (256 bytes" in c for c in got["checks"])
    held = {(h["what"], h["bytes"]) for h in got["held_at_peak"]}
    assert held == {("saved", 512), ("unsaved", 4), ("recomputed", 256), ("backward", 260)}
