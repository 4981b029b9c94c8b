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


# ---------------------------------------------------------------- the records (no torch)
def test_step_records_cover_both_frameworks_none_full_selective_b1_b2():
    seen = {(r["framework"], r["settings"]["recompute"], r["settings"]["mbs"]) for r in STEP_RECORDS}
    want = {(f, rc, b) for b in (1, 2) for f, rc in (("transformers", "none"), ("transformers", "full"),
                                                      ("mcore", "none"), ("mcore", "full"), ("mcore", "selective"))}
    assert want <= seen
    for r in STEP_RECORDS:
        assert r["command"].endswith(" --step") and "step" in r["measured"]


@pytest.mark.parametrize("rec", STEP_RECORDS, ids=IDS)
def test_a_step_record_adds_up(rec):
    """What is held at the peak sums to it (by holder and by torch's category); the forward's saves the step found
    among its own allocations are the bytes the trace recorded ([measured]: the Recorder of another run of the same
    model and tokens); the end of the forward is those and what is held otherwise; the peak is the largest moment."""
    st, m = rec["measured"]["step"], rec["measured"]
    assert sum(h["bytes"] for h in st["held_at_peak"]) == st["peak"]
    assert sum(st["categories_at_peak"].values()) == st["peak"]
    assert st["saved_at_end_of_forward"] == sum(r["bytes"] for r in m["activations_by_layer"]) + \
        m["activations_outside_layers"]
    assert st["end_of_forward"] - st["saved_at_end_of_forward"] == sum(
        g["bytes"] for g in st["unsaved_at_end_of_forward"])
    made = sum(h["bytes"] for h in st["held_at_peak"] if h["what"] in ("backward", "recomputed"))
    assert made == sum(g["bytes"] for g in st["made_at_peak"])
    assert st["end_of_forward"] <= st["forward_peak"] <= st["peak"]
    assert max(r["peak"] for r in st["layers"]) <= st["peak"]
    if st["phase"] != "forward":  # a peak in the backward is some layer's (or the head's) backward
        assert max(r["peak"] for r in st["layers"]) == st["peak"]
    else:
        assert st["forward_peak"] == st["peak"]


def _dims(rec):
    import json
    with open(records.config_path(rec)) as f:
        c = json.load(f)
    b, s = rec["settings"]["mbs"], rec["settings"]["seq"]
    L = c["num_hidden_layers"]
    return dict(b=b, s=s, t=b * s, h=c["hidden_size"], V=c["vocab_size"], nh=c["num_attention_heads"],
                dr=c["qk_rope_head_dim"], N=c["n_routed_experts"], k=c["num_experts_per_tok"],
                hE=c["moe_intermediate_size"], hs=c["moe_intermediate_size"] * c["n_shared_experts"],
                L=L, Lm=L - c["first_k_dense_replace"], Ba=2, one=int(b == 1))


def _none_layers(rec):
    """The layers' saved bytes of the step record without recomputation with ``rec``'s framework, expert
    implementation (transformers), micro-batch and sequence."""
    def same(r):
        return (r["framework"], r["settings"].get("experts"), r["settings"]["mbs"], r["settings"]["seq"]) == (
            rec["framework"], rec["settings"].get("experts"), rec["settings"]["mbs"], rec["settings"]["seq"])
    none = [r for r in STEP_RECORDS if r["settings"]["recompute"] == "none" and same(r)]
    assert len(none) == 1, [r["_file"] for r in none]
    return [x["bytes"] for x in none[0]["measured"]["activations_by_layer"]]


#: The router's token-copies per routed expert (expert order), per MoE layer, of the loop-expert full-recompute
#: records (the traced model's routing: the Recorder's saves of the no-recompute trace, each loop expert's int64
#: token indices).  Only the loop experts' transient depends on them (paper/traces/STEP.md).
LOOP_ROUTING = {
    "hf-tiny-b1-s256-bf16-eager-loop-full-step.toml": {1: [52, 96, 42, 79, 67, 69, 49, 58],
                                                       2: [129, 42, 21, 46, 44, 56, 97, 77]},
    "hf-tiny-b2-s256-bf16-eager-loop-full-step.toml": {1: [93, 168, 99, 183, 118, 146, 105, 112],
                                                       2: [213, 110, 93, 93, 105, 121, 131, 158]},
}


def step_excess(rec):
    """paper/traces/STEP.md's X = peak - A of a step record ("The peak as A + X"), from the config's dimensions
    and the no-recompute record's layer bytes: (X, the moment's name, details)."""
    d = _dims(rec)
    b, s, t, h, V, nh, dr, N, k, hE, hs, L, Lm, Ba, one = (d[x] for x in (
        "b", "s", "t", "h", "V", "nh", "dr", "N", "k", "hE", "hs", "L", "Lm", "Ba", "one"))
    fw, rc = rec["framework"], rec["settings"]["recompute"]
    if fw == "transformers" and rc == "none":
        return 8 * t * V - 8 * t + 8 * (L + Lm) + 4 - 8 * one, "head", {}
    if fw == "mcore" and rc in ("none", "selective"):
        return (Ba * b * nh * s * s + 4 * L * s * dr + Lm * (5 * t * N + 8 * N + 24) + 4 * L + Ba * t * (V + h)
                + (28 - 8 * one) * t + 8 * s), "cross-entropy", {}
    An = _none_layers(rec)
    AM = An[L - 1]
    if fw == "mcore":
        assert rc == "full"
        return (AM + Ba * b * nh * s * s + 4 * L * s * dr + Lm * (5 * t * N + 8 * N) + 8 * (Lm - 1) * t * k
                + 4 * t * k + 2 * Ba * t * h + 3 * Ba * t * k * h - 4 * t * V - 8 * t * h - 13 * t + 4 * L + 32), \
            "recompute", {}
    assert (fw, rc) == ("transformers", "full")
    U = Ba * b * s * s + 2 * Ba * s * dr + 8 * s + 8 * (L + Lm) + 4
    if rec["settings"]["experts"] == "grouped":
        return (AM + U - Ba * t * h - 4 * Ba * t * hs - 4 * t * h - 4 * t * V + 12 * t * k * h - 8 * t * k - 12 * t
                - 8 * one), "grouped", {}
    x_end = AM + U + Ba * t * h - 4 * t * h - 4 * t * V + 4 * t * N + 4 * t * k - 12 * t + 16 - 8 * one
    cE = 3 * Ba * h + 4 * Ba * hE + 20  # a loop expert's saves per token-copy

    def x_i(i, na, nb):  # layer i's transient: the second expert its backward visits, at gate_up's SelectBackward0
        W = sum(8 * (1 + (j >= L - Lm)) for j in range(i + 1, L))
        return (An[i] + U - W + (i + 1 - L) * Ba * t * h - 4 * Ba * t * hs - 4 * t * h - 4 * t * V - 12 * t - 8 * one
                + 2 * Ba * N * hE * h + 2 * Ba * hE * h + 4 * t * k - cE * (na + nb) + (16 + Ba * h) * nb)
    xs = {}
    for i, counts in LOOP_ROUTING[rec["_file"]].items():
        used = [n for n in counts if n > 0]
        assert sum(used) == t * k and len(used) >= 2
        xs[i] = (x_i(i, used[-1], used[-2]), used[-2])
    best = max([x_end] + [x for x, _ in xs.values()])
    return best, ("recompute" if best == x_end else "transient"), {
        "x_end": x_end, "x_i": xs, "bound": max(x_end, x_i(L - 1, 0, 0))}


@pytest.mark.parametrize("rec", STEP_RECORDS, ids=IDS)
def test_the_step_peak_follows_STEP_md(rec):
    """paper/traces/STEP.md's formulas, from the config's dimensions and the bytes the trace saved ([measured]):
    the end of the forward, the peak as A + X, where it is and what is held then."""
    st, m = rec["measured"]["step"], rec["measured"]
    d = _dims(rec)
    b, s, t, h, V, nh, dr, N, k, hE, hs, L, Lm, Ba, one = (d[x] for x in (
        "b", "s", "t", "h", "V", "nh", "dr", "N", "k", "hE", "hs", "L", "Lm", "Ba", "one"))
    A = sum(x["bytes"] for x in m["activations_by_layer"]) + m["activations_outside_layers"]
    fw, rc = rec["framework"], rec["settings"]["recompute"]
    where = (st["phase"], st["node"], st["op"], st["module"])
    X, moment, more = step_excess(rec)
    assert st["peak"] == A + X
    H = 4 * t * V + 2 * Ba * t * h + 4 * t * h + 20 * t + 4 + 8 * one  # transformers' head and embedding saves
    if fw == "transformers" and rc == "none":
        end = A + 8 * (L + Lm) + 4
        assert st["end_of_forward"] == end and m["activations_outside_layers"] == H + 2 * Ba * s * dr
        assert st["peak"] == end - (8 * t + 4 + 8 * one) + 4 + 8 * t * V
        assert where == ("backward", "LogSoftmaxBackward0", "aten::_log_softmax_backward_data", "(model)")
    elif fw == "transformers" and rc == "full":
        U = Ba * b * s * s + 2 * Ba * s * dr + 8 * s + 8 * (L + Lm) + 4
        assert st["end_of_forward"] == A + U and A == L * Ba * t * h + H
        AM = _none_layers(rec)[L - 1]
        if rec["settings"]["experts"] == "grouped":  # in the routed experts' backward, whatever the routing
            R = AM - Ba * t * h - 4 * Ba * t * hs - 8 * t * k
            assert st["peak"] == (L * Ba * t * h + 8 * t) + U + R + (Ba * t * h + 4) + (Ba * t * h + 12 * t * k * h)
            assert where == ("backward", "MulBackward0", "aten::mul", "model.layers.%d.mlp.experts" % (L - 1))
            assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
            fp32 = [g for g in st["made_at_peak"] if g["phase"] == "backward"
                    and g["module"] == "model.layers.%d.mlp.experts" % (L - 1)]
            assert sorted(g["node"] for g in fp32) == ["IndexBackward0", "MulBackward0", "MulBackward0"]
            assert all((g["dtype"], g["shape"], g["bytes"]) == ("float32", [t * k, h], 4 * t * k * h) for g in fp32)
        else:
            R = AM + 2 * Ba * t * h + 4 * t * N + 4 * t * k + 16
            assert A + more["x_end"] == (L * Ba * t * h + 8 * t) + U + R + Ba * t * h + 4
            assert A + more["x_end"] <= st["peak"] <= A + more["bound"]  # for any routing
            for i, (x, nb) in more["x_i"].items():  # each MoE layer's transient, below the peak or at it
                assert x <= X
                if moment == "transient":  # the layers' largest moments are their transients
                    assert next(r["peak"] for r in st["layers"] if r["layer"] == i) == A + x
            if moment == "transient":
                assert where[:3] == ("backward", "SelectBackward0", "aten::empty")
                i, nb = next((i, nb) for i, (x, nb) in more["x_i"].items() if x == X)
                assert st["layer"] == i
                made = {(g["node"], g["dtype"], tuple(g["shape"]), g["bytes"]) for g in st["made_at_peak"]}
                assert ("SelectBackward0", "bfloat16", (N, 2 * hE, h), Ba * N * 2 * hE * h) in made
                assert ("MmBackward0", "bfloat16", (nb, h), Ba * nb * h) in made  # the second expert's input grad
            else:
                assert where[0] == "recompute" and st["layer"] == L - 1
                assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
    elif fw == "mcore" and rc in ("none", "selective"):
        U = Ba * b * nh * s * s + 4 * L * s * dr + Lm * (5 * t * N + 8 * N + 24) + 4 * L
        assert st["end_of_forward"] == A + U + 4
        assert st["peak"] == A + U + Ba * t * (V + h) + (28 - 8 * one) * t + 8 * s
        assert where == ("forward", "", "aten::empty_strided", "(model)") and st["peak"] == st["forward_peak"]
    else:
        assert (fw, rc) == ("mcore", "full")
        state = 5 * t * N + 8 * N + 8 * t * k  # a MoE layer's dispatcher state after a forward without grad
        Uf = Ba * b * nh * s * s + 4 * L * s * dr + Lm * state + 4
        assert st["end_of_forward"] == A + Uf
        assert A == L * Ba * t * h + 4 * t * V + 8 * t * h + Ba * t * h + 21 * t
        R = _none_layers(rec)[L - 1] + 2 * Ba * t * h + 3 * Ba * t * k * h + 5 * t * N + 4 * t * k + 8 * N + 4 * L + 24
        assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
        assert st["peak"] == (L * Ba * t * h + 8 * t) + (Uf - state) + Ba * t * h + 4 + R
        assert where == ("recompute", "", "aten::cat", "decoder.layers.%d.mlp.experts" % (L - 1))


def test_every_loop_full_record_has_its_routing():
    loop_full = {r["_file"] for r in STEP_RECORDS if r["framework"] == "transformers" and
                 r["settings"]["recompute"] == "full" and r["settings"].get("experts") == "loop"}
    assert loop_full == set(LOOP_ROUTING)


# ---------------------------------------------------------------- slow: measured again (torch)
AGAIN = [r for r in STEP_RECORDS if r["_file"] in ("hf-tiny-b1-s256-bf16-eager-loop-step.toml",
                                                   "mcore-tiny-b1-s256-bf16-full-step.toml")]


@pytest.mark.trace
@pytest.mark.parametrize("rec", AGAIN, ids=[r["_file"] for r in AGAIN])
def test_a_step_measured_again_equals_its_record(rec):
    """The whole [measured.step] section, as ``memsym trace --step --record`` writes it, measured again."""
    _torch()
    import tomllib
    out = records.retrace(rec)
    assert out["measured"]["activations_by_layer"] == rec["measured"]["activations_by_layer"]
    again = tomllib.loads(records.to_toml(out, sha256_of_config=rec["config"]["sha256"]))["measured"]["step"]
    assert again["peak"] == rec["measured"]["step"]["peak"]
    assert again == rec["measured"]["step"]


def test_the_two_records_measured_again_are_there():
    assert len(AGAIN) == 2


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the step tests must run, not skip
    assert _have_torch(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"
