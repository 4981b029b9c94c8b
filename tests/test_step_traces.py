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
    and counts (a module run inside the backward is a recomputation).  Forward: x 256, x*w 256 (saved by the
    checkpoint), exp's output 256 (nobody saves it: freed after the sum), the loss 4: 516 at the end.  Backward:
    the seed 4, exp recomputed 256, its gradient 256 (the leaf's .grad): the peak 4 + 256 + 256 + 4 + 256 + 256 =
    1032 (776 if the leaf's .grad were left out)."""
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
                dr=c["qk_rope_head_dim"], dh=c["qk_nope_head_dim"] + c["qk_rope_head_dim"], dv=c["v_head_dim"],
                dq=c["q_lora_rank"], dc=c["kv_lora_rank"], N=c["n_routed_experts"], k=c["num_experts_per_tok"],
                hE=c["moe_intermediate_size"], hs=c["moe_intermediate_size"] * c["n_shared_experts"],
                L=L, Lm=L - c["first_k_dense_replace"], Ba=2, one=int(b == 1), D=c.get("num_nextn_predict_layers", 0))


def _none_record(rec):
    """The step record without recomputation with ``rec``'s framework, config, expert implementation (transformers),
    micro-batch and sequence, or None."""
    def same(r):
        return (r["framework"], r["config"]["path"], r["settings"].get("experts"), r["settings"]["mbs"],
                r["settings"]["seq"]) == (rec["framework"], rec["config"]["path"], rec["settings"].get("experts"),
                                          rec["settings"]["mbs"], rec["settings"]["seq"])
    none = [r for r in STEP_RECORDS if r["settings"]["recompute"] == "none" and same(r)]
    assert len(none) <= 1, [r["_file"] for r in none]
    return none[0] if none else None


def _none_layers(rec):
    """The layers' saved bytes of the step record without recomputation with ``rec``'s framework, expert
    implementation (transformers), micro-batch and sequence."""
    none = _none_record(rec)
    assert none is not None, rec["_file"]
    return [x["bytes"] for x in none["measured"]["activations_by_layer"]]


#: The router's token-copies per routed expert (expert order), per MoE layer, of the loop-expert full-recompute
#: records and of the short no-recompute ones whose peak is the loop's transient (the traced model's routing: the
#: Recorder's saves of the no-recompute trace, each loop expert's int64 token indices; the records keep them as
#: ``expert_tokens``).  Only the loop experts' transient depends on them (paper/traces/STEP.md).
LOOP_ROUTING = {
    "hf-tiny-b1-s256-bf16-eager-loop-full-step.toml": {1: [52, 96, 42, 79, 67, 69, 49, 58],
                                                       2: [129, 42, 21, 46, 44, 56, 97, 77]},
    "hf-tiny-b2-s256-bf16-eager-loop-full-step.toml": {1: [93, 168, 99, 183, 118, 146, 105, 112],
                                                       2: [213, 110, 93, 93, 105, 121, 131, 158]},
    "hf-tiny-b1-s32-bf16-eager-loop-step.toml": {1: [6, 19, 4, 15, 5, 4, 5, 6], 2: [21, 8, 4, 10, 3, 4, 8, 6]},
    "hf-tiny-b1-s64-bf16-eager-loop-step.toml": {1: [8, 35, 9, 27, 11, 13, 10, 15],
                                                 2: [41, 13, 7, 19, 4, 9, 19, 16]},
    "hf-tiny-b2-s32-bf16-eager-loop-step.toml": {1: [8, 45, 4, 26, 17, 8, 11, 9],
                                                 2: [25, 21, 4, 18, 6, 17, 29, 8]},
}


def _routing(rec):
    """{MoE layer: its router's token-copies per expert} of a loop-expert record: :data:`LOOP_ROUTING`'s, else the
    record's own ``expert_tokens``."""
    if rec["_file"] in LOOP_ROUTING:
        return LOOP_ROUTING[rec["_file"]]
    return {r["layer"]: r["counts"] for r in rec["measured"]["step"]["expert_tokens"]}


def attention_parts(rec):
    """paper/traces/STEP.md ("The attention's moments"): the pieces of the attention moments, from the dimensions.
    S: layer L-1's saves made up to its core attention's scores (norms, projections, RoPE, q and k); for
    transformers also its FP32 softmax output.  G: the softmax backward's buffers."""
    d = _dims(rec)
    b, s, t, h, nh, dr, dh, dv, dq, dc, Ba = (d[x] for x in ("b", "s", "t", "h", "nh", "dr", "dh", "dv", "dq", "dc",
                                                             "Ba"))
    P = b * nh * s * s  # score elements
    if rec["framework"] == "transformers":
        S = (4 + 2 * Ba) * t * (h + dq + dc) + 12 * t + 2 * Ba * t * nh * dh + 4 * P
    else:
        S = (8 + Ba) * t * (h + dq + dc) + 12 * t + 4 * Ba * s * dr + 2 * Ba * t * nh * dh
    return dict(P=P, S=S, G=8 * P + Ba * t * h + 4)


def moments(rec):
    """paper/traces/STEP.md's X = peak - A of every moment a step record's family passes through ("The peak as
    A + X"), from the config's dimensions, the record's own layer bytes and (where named) the no-recompute
    record's: {moment: X}; moments needing a no-recompute record that is not there are left out."""
    d = _dims(rec)
    b, s, t, h, V, nh, dr, dv, N, k, hE, hs, L, Lm, Ba, one = (d[x] for x in (
        "b", "s", "t", "h", "V", "nh", "dr", "dv", "N", "k", "hE", "hs", "L", "Lm", "Ba", "one"))
    fw, rc = rec["framework"], rec["settings"]["recompute"]
    Al = [x["bytes"] for x in rec["measured"]["activations_by_layer"]]
    ap = attention_parts(rec)
    P, S, G = ap["P"], ap["S"], ap["G"]
    none = _none_record(rec)
    AM = none and [x["bytes"] for x in none["measured"]["activations_by_layer"]][L - 1]
    out = {}
    if fw == "transformers":
        H = 4 * t * V + 2 * Ba * t * h + 4 * t * h + 20 * t + 4 + 8 * one
        U = Ba * b * s * s + 2 * Ba * s * dr + 8 * s + 8 * (L + Lm) + 4
        cE = 3 * Ba * h + 4 * Ba * hE + 20  # a loop expert's saves per token-copy
        if rc == "none":
            out["head"] = 8 * t * V - 8 * t + 8 * (L + Lm) + 4 - 8 * one
            out["attention"] = S - Al[L - 1] - H + 8 * t + 8 * (L + Lm) - 4 + G + Ba * t * nh * dv
            # layer L-1's shared experts' MulBackward0: down_proj's input gradient and two products for its input
            out["shared"] = 8 * (L + Lm) + 4 - H + 8 * t + Ba * t * h + 4 + 2 * Ba * t * hs
            if rec["settings"]["experts"] == "grouped":  # layer L-1's routed experts, at the engine's cast
                out["grouped"] = (-4 * t * V - Ba * t * h - 4 * t * h - 12 * t + 4 - 8 * one + 8 * (L + Lm)
                                  - 4 * Ba * t * hs - 8 * t * k + 12 * t * k * h + Ba * t * k * h)
                return out

            def q_i(i, na, nb):  # layer i's transient, every earlier layer's saves held, the later ones' released
                W = sum(Al[j] + 8 * (1 + (j >= L - Lm)) for j in range(i + 1, L))
                return (-4 * t * V - 4 * t * h - 12 * t + 4 - 8 * one + 8 * (L + Lm) - W - 4 * Ba * t * hs
                        + 4 * t * k + 2 * Ba * N * hE * h + 2 * Ba * hE * h - cE * (na + nb) + (16 + Ba * h) * nb)
            for i, counts in _routing(rec).items():
                used = [n for n in counts if n > 0]
                assert sum(used) == t * k and len(used) >= 2
                out["transient %d" % i] = q_i(i, used[-1], used[-2])
            out["bound"] = max(out["head"], out["attention"], q_i(L - 1, 0, 0))  # not a moment: for any routing
            return out
        assert rc == "full"
        out["attention"] = S + U - 8 - H + 8 * t + G + Ba * t * nh * dv
        x_end = AM and AM + U + Ba * t * h - 4 * t * h - 4 * t * V + 4 * t * N + 4 * t * k - 12 * t + 16 - 8 * one
        if AM is not None:  # the rebuilt layer L-1 whole, its shared experts' MulBackward0 (as without recomputation)
            out["shared"] = AM + U - H + 8 * t + Ba * t * h + 4 + 2 * Ba * t * hs
        if rec["settings"]["experts"] == "grouped":
            if AM is not None:
                out["grouped"] = (AM + U - Ba * t * h - 4 * Ba * t * hs - 4 * t * h - 4 * t * V + 12 * t * k * h
                                  - 8 * t * k - 12 * t - 8 * one)
                # the rebuild at grouped_mm's return: no shared experts' saves yet, its FP32 locals
                out["grouped return"] = x_end - 4 * Ba * t * hs + 4 * t * h * (k + 1) + 12 * t * k + 4 * N
            return out
        out["recompute"] = x_end
        An = _none_layers(rec)

        def x_i(i, na, nb):  # layer i's transient: the second expert its backward visits, at gate_up's SelectBackward0
            W = sum(8 * (1 + (j >= L - Lm)) for j in range(i + 1, L))
            return (An[i] + U - W + (i + 1 - L) * Ba * t * h - 4 * Ba * t * hs - 4 * t * h - 4 * t * V - 12 * t
                    - 8 * one + 2 * Ba * N * hE * h + 2 * Ba * hE * h + 4 * t * k - cE * (na + nb) + (16 + Ba * h) * nb)
        for i, counts in _routing(rec).items():
            used = [n for n in counts if n > 0]
            assert sum(used) == t * k and len(used) >= 2
            out["transient %d" % i] = x_i(i, used[-1], used[-2])
        out["bound"] = max(x_end, x_i(L - 1, 0, 0))  # not a moment: the routing-free upper bound
        return out
    H = 4 * t * V + 8 * t * h + Ba * t * h + 21 * t
    U = Ba * P + 4 * L * s * dr + Lm * (5 * t * N + 8 * N + 24) + 4 * L
    D = d["D"]  # MTP modules (STEP.md, "With MTP modules"): D MoE layers more and their wrapped loss scales
    U += D * (4 * s * dr + 5 * t * N + 8 * N + 24 + 4 + 8)
    if rc in ("none", "selective"):
        # with MTP modules the last MTP head's logits and locals and the decoder's output are held too
        out["cross-entropy"] = (U + Ba * t * (V + h) + (28 - 8 * one) * t + 8 * s
                                + min(1, D) * (Ba * t * (V + h) + 12 * t))
        # forward, layer L-1's softmax cast to B_a: what is left of U, the layer's attention so far, the residual
        # (with MTP modules the MTP layer's: the heads' saves not made, the shifted embedding and decoder output held)
        out["attention forward"] = (S + Ba * t * nh * dv + s * s + 4 * P + Ba * P + 4 * (rc == "selective")
                                    + U - 8 * D - (5 * t * N + 8 * N + 24) + Ba * P + 4 * P + 2 * Ba * t * h + 8 * s
                                    - Al[L - 1] - H + 8 * t + D * (Ba * t * h - 4 * t * V - 13 * t - 8))
        if rc == "selective":  # layer L-1's backward, its core attention recomputed, at SoftmaxBackward0 (with MTP
            # modules the MTP layer's, first: the heads' saves released, SplitBackward0's (1 + D) B_a t h held)
            out["attention"] = (S + Ba * t * nh * dv + 4 + 8 * t * k - Al[L - 1] - H + 8 * t + U - 20 - 8 * D
                                + 4 * P + s * s + Ba * t * nh * dv + G + 2 * Ba * t * nh * dv
                                + min(1, D) * Ba * t * h - D * (4 * t * V + 21 * t + 8))
        return out
    assert rc == "full"
    state = 5 * t * N + 8 * N + 8 * t * k
    if AM is not None:
        out["recompute"] = (AM + Ba * P + 4 * L * s * dr + Lm * (5 * t * N + 8 * N) + 8 * (Lm - 1) * t * k
                            + 4 * t * k + 2 * Ba * t * h + 3 * Ba * t * k * h - 4 * t * V - 8 * t * h - 13 * t + 4 * L
                            + 32)
    # layer 0's backward (its recomputation held, the later layers' input gradients too), at SoftmaxBackward0
    out["attention"] = (8 * t - H + Ba * P + 4 * L * s * dr + Lm * state + 4 * L + 4 + S + 4 * P + s * s + Ba * t * h
                        + G + Ba * t * nh * dv + (L - 1) * Ba * t * h)
    return out


def step_excess(rec):
    """paper/traces/STEP.md's X = peak - A of a step record ("The peak as A + X"): the largest of its family's
    moments (:func:`moments`): (X, the moment's name, every moment)."""
    ms = {key: x for key, x in moments(rec).items() if key != "bound"}
    best = max(ms, key=ms.get)
    return ms[best], best, moments(rec)


@pytest.mark.parametrize("rec", STEP_RECORDS, ids=IDS)
def test_the_step_peak_follows_STEP_md(rec):
    """paper/traces/STEP.md's formulas, from the config's dimensions and the bytes the trace saved ([measured]):
    the end of the forward, the peak as A + X (the largest moment), where it is and what is held then."""
    st, m = rec["measured"]["step"], rec["measured"]
    d = _dims(rec)
    b, s, t, h, V, nh, dr, dv, N, k, hE, hs, L, Lm, Ba, one = (d[x] for x in (
        "b", "s", "t", "h", "V", "nh", "dr", "dv", "N", "k", "hE", "hs", "L", "Lm", "Ba", "one"))
    Al = [x["bytes"] for x in m["activations_by_layer"]]
    A = sum(Al) + m["activations_outside_layers"]
    fw, rc = rec["framework"], rec["settings"]["recompute"]
    where = (st["phase"], st["node"], st["op"], st["module"])
    X, moment, more = step_excess(rec)
    assert st["peak"] == A + X, (moment, st["peak"] - A - X)
    ap = attention_parts(rec)
    P, S = ap["P"], ap["S"]
    H = 4 * t * V + 2 * Ba * t * h + 4 * t * h + 20 * t + 4 + 8 * one  # transformers' head and embedding saves
    Hm = 4 * t * V + 8 * t * h + Ba * t * h + 21 * t  # Megatron-Core's
    softmax_bwd = ("backward", "SoftmaxBackward0", "aten::_softmax_backward_data")
    made = {(g["node"], g["dtype"], tuple(g["shape"]), g["bytes"]) for g in st["made_at_peak"]}
    if moment.startswith("attention"):  # the FP32 gradient of the probabilities and the softmax backward's output
        if moment == "attention":
            assert where[:3] == softmax_bwd
            for node in ("SoftmaxBackward0", "ToCopyBackward0"):
                assert (node, "float32", (b, nh, s, s), 4 * P) in made
    if fw == "transformers" and rc == "none":
        end = A + 8 * (L + Lm) + 4
        assert st["end_of_forward"] == end and m["activations_outside_layers"] == H + 2 * Ba * s * dr
        if rec["settings"]["experts"] == "loop":  # the routing-free bound holds; each MoE layer passes its transient
            assert A + max(more["head"], more["attention"]) <= st["peak"] <= A + more["bound"]
            for key, x in more.items():
                if key.startswith("transient"):
                    i = int(key.split()[1])
                    largest = next(r["peak"] for r in st["layers"] if r["layer"] == i)
                    # its layer's largest moment, but at b 2 s 256 layer 2's: its shared expert's MulBackward0, all of
                    # the layer's saves held (not derived; below the head's)
                    above = 16996 if (rec["_file"], i) == ("hf-tiny-b2-s256-bf16-eager-loop-step.toml", 2) else 0
                    assert largest - (A + x) == above
        if moment == "head":
            assert st["peak"] == end - (8 * t + 4 + 8 * one) + 4 + 8 * t * V
            assert where == ("backward", "LogSoftmaxBackward0", "aten::_log_softmax_backward_data", "(model)")
        elif moment in ("grouped",) or moment.startswith("transient"):  # the routed experts' backward of a MoE layer
            i = L - 1 if moment == "grouped" else int(moment.split()[1])
            assert where[3] == "model.layers.%d.mlp.experts" % i and st["layer"] == i
            assert {"what": "saved", "layer": "outside", "bytes": 8 * t + 2 * Ba * s * dr} in st["held_at_peak"]
            assert {"what": "backward", "layer": "outside", "bytes": Ba * t * h + 4} in st["held_at_peak"]
            for j in range(i):  # every earlier layer's saves are held
                assert {"what": "saved", "layer": j, "bytes": Al[j]} in st["held_at_peak"]
            assert not [x for x in st["held_at_peak"] if x["what"] == "saved" and x["layer"] not in
                        (*range(i + 1), "outside")]
            if moment == "grouped":  # three FP32 t k x h buffers and the engine's B_a cast of one of them
                assert where[:3] == ("backward", "MulBackward0 (engine)", "aten::empty_strided")
                left = Al[i] - Ba * t * h - 4 * Ba * t * hs - 8 * t * k
                ours = {(g["node"], g["dtype"], tuple(g["shape"]), g["bytes"], g["count"]) for g in st["made_at_peak"]
                        if g["module"] == "model.layers.%d.mlp.experts" % i}
                assert ours == {("IndexBackward0", "float32", (t * k, h), 4 * t * k * h, 1),
                                ("MulBackward0", "float32", (t * k, h), 8 * t * k * h, 2),
                                ("MulBackward0 (engine)", "bfloat16", (t * k, h), Ba * t * k * h, 1)}
            else:  # the second expert the backward visits: its gate_up_proj's whole-parameter zero gradient
                assert where[:3] == ("backward", "SelectBackward0", "aten::empty")
                counts = [n for n in _routing(rec)[i] if n > 0]
                cE = 3 * Ba * h + 4 * Ba * hE + 20  # a loop expert's saves per token-copy
                left = Al[i] - Ba * t * h - 4 * Ba * t * hs - cE * (counts[-1] + counts[-2]) + 16 * counts[-2]
                assert ("SelectBackward0", "bfloat16", (N, 2 * hE, h), Ba * N * 2 * hE * h) in made
                assert ("MmBackward0", "bfloat16", (counts[-2], h), Ba * counts[-2] * h) in made  # 2nd expert's
            assert {"what": "saved", "layer": i, "bytes": left} in st["held_at_peak"]
        else:  # layer L-1's attention: its saves up to the softmax are what is left of it
            assert moment == "attention" and where[3] == "model.layers.%d.self_attn" % (L - 1)
            assert {"what": "saved", "layer": L - 1, "bytes": S} in st["held_at_peak"]
            assert {"what": "saved", "layer": "outside", "bytes": 8 * t + 2 * Ba * s * dr} in st["held_at_peak"]
    elif fw == "transformers" and rc == "full":
        U = Ba * b * s * s + 2 * Ba * s * dr + 8 * s + 8 * (L + Lm) + 4
        assert st["end_of_forward"] == A + U and A == L * Ba * t * h + H
        if moment == "attention":  # layer L-1 recomputed up to its softmax
            assert where[3] == "model.layers.%d.self_attn" % (L - 1)
            assert {"what": "recomputed", "layer": L - 1, "bytes": S} in st["held_at_peak"]
        elif rec["settings"]["experts"] == "grouped":  # in the routed experts' backward, whatever the routing
            AM = _none_layers(rec)[L - 1]
            R = AM - Ba * t * h - 4 * Ba * t * hs - 8 * t * k
            assert st["peak"] == (L * Ba * t * h + 8 * t) + U + R + (Ba * t * h + 4) + (Ba * t * h + 12 * t * k * h)
            assert where == ("backward", "MulBackward0", "aten::mul", "model.layers.%d.mlp.experts" % (L - 1))
            assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
            fp32 = [g for g in st["made_at_peak"] if g["phase"] == "backward"
                    and g["module"] == "model.layers.%d.mlp.experts" % (L - 1)]
            assert sorted(g["node"] for g in fp32) == ["IndexBackward0", "MulBackward0", "MulBackward0"]
            assert all((g["dtype"], g["shape"], g["bytes"]) == ("float32", [t * k, h], 4 * t * k * h) for g in fp32)
        else:
            AM = _none_layers(rec)[L - 1]
            R = AM + 2 * Ba * t * h + 4 * t * N + 4 * t * k + 16
            assert A + more["recompute"] == (L * Ba * t * h + 8 * t) + U + R + Ba * t * h + 4
            assert A + more["recompute"] <= st["peak"] <= A + more["bound"]  # for any routing
            xs = {int(key.split()[1]): x for key, x in more.items() if key.startswith("transient")}
            for i, x in xs.items():  # each MoE layer's transient, below the peak or at it
                assert x <= X
                if moment.startswith("transient"):  # the layers' largest moments are their transients
                    assert next(r["peak"] for r in st["layers"] if r["layer"] == i) == A + x
            if moment.startswith("transient"):
                assert where[:3] == ("backward", "SelectBackward0", "aten::empty")
                i = int(moment.split()[1])
                counts = [n for n in LOOP_ROUTING[rec["_file"]][i] if n > 0]
                assert st["layer"] == i
                assert ("SelectBackward0", "bfloat16", (N, 2 * hE, h), Ba * N * 2 * hE * h) in made
                assert ("MmBackward0", "bfloat16", (counts[-2], h), Ba * counts[-2] * h) in made  # 2nd expert's
            else:
                assert where[0] == "recompute" and st["layer"] == L - 1
                assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
    elif fw == "mcore" and rc in ("none", "selective"):
        U = Ba * P + 4 * L * s * dr + Lm * (5 * t * N + 8 * N + 24) + 4 * L
        U += d["D"] * (4 * s * dr + 5 * t * N + 8 * N + 24 + 4 + 8)  # MTP modules' layers and loss scales
        assert st["end_of_forward"] == A + U + 4
        # the forward's largest moment is the cross-entropy's or layer L-1's softmax cast
        assert st["forward_peak"] == A + max(more["cross-entropy"], more["attention forward"])
        if moment == "cross-entropy":
            assert st["peak"] == A + U + Ba * t * (V + h) + (28 - 8 * one) * t + 8 * s
            assert where == ("forward", "", "aten::empty_strided", "(model)") and st["peak"] == st["forward_peak"]
        elif moment == "attention forward":  # the B_a probabilities made while the scores and their FP32 copy live
            assert where == ("forward", "", "aten::empty_strided", "decoder.layers.%d.self_attention.core_attention."
                             "scale_mask_softmax" % (L - 1)) and st["peak"] == st["forward_peak"]
            assert rc == "none"
            assert {"what": "saved", "layer": L - 1, "bytes": S + Ba * t * nh * dv + s * s + 4 * P + Ba * P} in \
                st["held_at_peak"]
            assert {"what": "unsaved", "layer": L - 1, "bytes": Ba * P + 4 * P + 4 * s * dr} in st["held_at_peak"]
        else:  # layer L-1's core attention recomputed, at its softmax backward (with MTP modules the MTP layer's)
            layer, mod = ("mtp", "mtp.layers.0.transformer_layer") if d["D"] else (L - 1, "decoder.layers.%d" % (L - 1))
            assert rc == "selective" and where[3] == mod + ".self_attention.core_attention.scale_mask_softmax"
            if layer != "mtp":  # (the trace counts the MTP layer's saves outside the layers)
                assert {"what": "saved", "layer": L - 1, "bytes": S + Ba * t * nh * dv + 4 + 8 * t * k} in \
                    st["held_at_peak"]
            else:  # SplitBackward0's cat of the heads' input gradients, the value's .grad and the seed
                held = (1 + d["D"]) * Ba * t * h + Ba * t * nh * dv + 4
                assert {"what": "backward", "layer": "outside", "bytes": held} in st["held_at_peak"]
            assert {"what": "recomputed", "layer": layer, "bytes": 4 * P + s * s + Ba * t * nh * dv} in \
                st["held_at_peak"]
    else:
        assert (fw, rc) == ("mcore", "full")
        state = 5 * t * N + 8 * N + 8 * t * k  # a MoE layer's dispatcher state after a forward without grad
        Uf = Ba * P + 4 * L * s * dr + Lm * state + 4
        assert st["end_of_forward"] == A + Uf
        assert A == L * Ba * t * h + Hm
        if moment == "attention":  # layer 0's, recomputed up to its softmax, the later layers' input gradients held
            assert where[3] == "decoder.layers.0.self_attention.core_attention.scale_mask_softmax" and st["layer"] == 0
            assert {"what": "recomputed", "layer": 0, "bytes": S + 4 * P + s * s + Ba * t * h} in st["held_at_peak"]
            for i in range(1, L):
                assert {"what": "backward", "layer": i, "bytes": Ba * t * h} in st["held_at_peak"]
            return
        R = _none_layers(rec)[L - 1] + 2 * Ba * t * h + 3 * Ba * t * k * h + 5 * t * N + 4 * t * k + 8 * N + 4 * L + 24
        assert {"what": "recomputed", "layer": L - 1, "bytes": R} in st["held_at_peak"]
        assert st["peak"] == (L * Ba * t * h + 8 * t) + (Uf - state) + Ba * t * h + 4 + R
        assert where == ("recompute", "", "aten::cat", "decoder.layers.%d.mlp.experts" % (L - 1))


def test_the_attention_moments_bind_from_s_1024():
    """At s 256 the head (transformers) or the rebuilt layer binds; at s 1024 a layer's attention does, in every
    family of the records (Megatron-Core without recomputation in its forward)."""
    long = [r for r in STEP_RECORDS if r["settings"]["seq"] == 1024]
    assert {(r["framework"], r["settings"]["recompute"]) for r in long} == {
        ("transformers", "none"), ("transformers", "full"), ("mcore", "none"), ("mcore", "selective"),
        ("mcore", "full")}
    for r in long:
        assert step_excess(r)[1].startswith("attention")
    for r in STEP_RECORDS:
        if r["settings"]["seq"] == 256:
            assert not step_excess(r)[1].startswith("attention")


def test_every_loop_full_record_has_its_routing():
    loop_full = {r["_file"] for r in STEP_RECORDS if r["framework"] == "transformers" and
                 r["settings"]["recompute"] == "full" and r["settings"].get("experts") == "loop"}
    assert loop_full <= set(LOOP_ROUTING)
    for r in STEP_RECORDS:  # the counts written here are the records' own
        if r["_file"] in LOOP_ROUTING:
            assert {x["layer"]: x["counts"] for x in r["measured"]["step"]["expert_tokens"]} == LOOP_ROUTING[r["_file"]]


def test_the_routed_experts_moments_bind_at_short_sequences():
    """Without recomputation a MoE layer's routed experts' backward (the loop's whole-parameter zero gradient;
    grouped_mm's FP32 t k x h buffers) holds every earlier layer's saves: above the head's 8 t V at s 32 and 64 on
    the tiny config (grouped_mm: with vocab_size 256, tests/data/tiny-vocab256), below it at s 256."""
    none = [r for r in STEP_RECORDS if r["framework"] == "transformers" and r["settings"]["recompute"] == "none"]
    short = {r["_file"]: step_excess(r)[1] for r in none if r["settings"]["seq"] < 256}
    assert short == {"hf-tiny-b1-s32-bf16-eager-loop-step.toml": "transient 2",
                     "hf-tiny-b1-s64-bf16-eager-loop-step.toml": "transient 2",
                     "hf-tiny-b2-s32-bf16-eager-loop-step.toml": "transient 2",
                     "hf-tiny-vocab256-b1-s32-bf16-eager-grouped-step.toml": "grouped",
                     "hf-tiny-vocab256-b1-s64-bf16-eager-grouped-step.toml": "grouped",
                     "hf-tiny-vocab256-b2-s64-bf16-eager-grouped-step.toml": "grouped"}
    for r in none:
        if r["settings"]["seq"] == 256:
            assert step_excess(r)[1] == "head"


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
    want = rec["measured"]["step"]
    assert again["peak"] == want["peak"]
    # Another CPU's BF16 kernels (or their threads' reduction order) can break a router tie the other way, in the
    # forward or in a recomputed one: a token or two goes to another expert. What depends on it (the experts'
    # buffers at the peak, each MoE layer's own peak, the counts) then moves by those tokens; everything else is
    # measured again exactly.
    routed = ("expert_tokens", "layers", "made_at_peak")
    assert {k: v for k, v in again.items() if k not in routed} == {k: v for k, v in want.items() if k not in routed}
    for a, b in zip(again.get("expert_tokens", []), want.get("expert_tokens", []), strict=True):
        assert a["layer"] == b["layer"] and sum(a["counts"]) == sum(b["counts"])
        assert max(abs(x - y) for x, y in zip(a["counts"], b["counts"], strict=True)) <= 2
    assert [{k: v for k, v in x.items() if k != "peak"} for x in again["layers"]] == \
        [{k: v for k, v in x.items() if k != "peak"} for x in want["layers"]]
    outside = lambda made: [m for m in made if ".experts." not in m["module"]]  # noqa: E731
    assert outside(again["made_at_peak"]) == outside(want["made_at_peak"])


def test_the_two_records_measured_again_are_there():
    assert len(AGAIN) == 2


if os.environ.get("MEMSYM_REQUIRE_TRACE"):  # CI with the extra: the step tests must run, not skip
    assert _have_torch(), "MEMSYM_REQUIRE_TRACE is set but the trace extra is not installed"
