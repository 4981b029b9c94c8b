"""The recorder's semantics (memsym/trace/recorder.py): a save counts while the autograd node that saved
it is alive at the end of the forward.  Expectations are the byte sizes of the tensors a tiny module
saves, written by hand from what each torch operation saves (mul saves its other operand, exp its
output, sin its input), not computed by memsym."""
import os

import pytest


def _torch():
    from memsym.trace import missing
    if missing("transformers") is not None:
        if os.environ.get("MEMSYM_REQUIRE_TRACE"):
            raise AssertionError("MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed")
        pytest.skip("needs pip install 'memsym[trace]'")
    import torch
    return torch


def _module(torch, discard):
    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Identity(), torch.nn.Identity()])
            self.w = torch.nn.Parameter(torch.ones(8, dtype=torch.float32))

        def forward(self, x):
            kept = (x * self.w).exp()  # mul saves x (8 floats: 32 B) and w (a parameter: excluded); exp its output
            if discard:                        # a node whose output is dropped at once: freed during the forward
                _ = torch.sin(x * 3.0)         # mul by a scalar saves nothing; sin saves its input (32 B)
                idx = torch.topk(x, 2)[1]      # only the indices used: topk's node (it saves its int64 indices) dies
                del idx
            return kept.sum()
    return Toy()


def test_a_node_freed_during_the_forward_holds_nothing():
    torch = _torch()
    from memsym.trace.recorder import Recorder
    x = torch.randn(8, requires_grad=True)
    for discard in (False, True):
        model = _module(torch, discard)
        with Recorder(model) as rec:
            out = model(x)
        held = sorted(r.nbytes for r in rec.held())
        assert held == [32, 32], (discard, held)       # x (saved by mul) and exp's output, 8 FP32 each
        gone = sorted(r.nbytes for r in rec.discarded())
        # sin's input (the 32 B product) and topk's int64 indices (2 x 8 B): saved, then freed with their nodes
        assert gone == ([] if not discard else [16, 32]), gone
        out.backward()                                  # the graph still trains
        assert x.grad is not None
        x.grad = None


def test_a_saved_output_does_not_keep_its_own_node_alive():
    """exp saves its *output*: handing autograd the tensor itself would tie the node to itself through the
    output's grad_fn (a cycle gc cannot see); the recorder's holder keeps it detached, so a dropped exp is freed."""
    torch = _torch()
    from memsym.trace.recorder import Recorder

    class Drop(torch.nn.Module):
        def forward(self, x):
            torch.exp(x * 2.0)             # output saved by exp, then dropped
            return (x * x).sum()           # mul saves x twice (one storage)
    x = torch.randn(16, requires_grad=True)
    model = Drop()
    with Recorder(model) as rec:
        out = model(x)
    assert [r.nbytes for r in rec.held()] == [64]       # x, 16 FP32
    assert [r.nbytes for r in rec.discarded()] == [64]  # exp's output, 16 FP32
    out.backward()


def test_a_stage_modules_output_counts_outside_the_layers_however_many_layers_hold_it():
    """transformers' RoPE tables are computed once before the layers and handed to each: with several layers
    their saves make them shared (outside), and with one layer they must stay outside too (Recorder(stage=)),
    not move into that layer (what the preset predicts: the stage's, whatever its layer count)."""
    torch = _torch()
    from memsym.trace.recorder import Recorder

    class Table(torch.nn.Module):
        def forward(self, x):
            return torch.ones(8, dtype=torch.float32) * 2.0  # 32 B, no grad: only a layer's mul saves it

    class Mul(torch.nn.Module):
        def forward(self, x, table):
            return x * table                               # saves table (x requires grad)

    class Model(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.table = Table()
            self.layers = torch.nn.ModuleList([Mul() for _ in range(n)])

        def forward(self, x):
            t = self.table(x)
            for layer in self.layers:
                x = layer(x, t)
            return x.sum()
    x = torch.randn(8, requires_grad=True)
    for n in (1, 2):
        for stage in (False, True):
            model = Model(n)
            with Recorder(model, stage=(model.table,) if stage else ()) as rec:
                out = model(x)
            per, outside = rec.by_layer(n)
            # each layer's mul saves the table only (32 B, one storage): one layer's alone unless it is the stage's
            if n == 1:
                assert (per, outside) == (([0], 32) if stage else ([32], 0)), (stage, per, outside)
            else:
                assert (per, outside) == ([0, 0], 32), (stage, per, outside)
            out.backward()
