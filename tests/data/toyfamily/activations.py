"""The tensors one toy layer keeps for backward, per kind (the ``activation_specs`` hook's module)."""
from derivations.notation import B_a, B_k, CP, SP, TP, b, d_h, h, n_h, s
from derivations.tensors import dense_specs, head_specs, norm_parts
from symbolic.term import Part
from toyfamily.parameters import n_kv


def gqa_specs():
    return (
        Part("norm_in", "RMSNorm input (the layer input)", (B_a, b, s, h), (SP, CP), "toy",
             ("layer_input", "plain_norm"), row="x"),
        *norm_parts(h, (SP, CP), "the attention's"),
        Part("qkv_in", "q, k, v projections' input", (B_a, b, s, h), (SP, CP), "toy", ("norm",), row="x"),
        Part("q", "q", (B_a, b, s, n_h, d_h), (TP, CP), "toy", ("mla_up",)),
        Part("k", "k", (B_a, b, s, n_kv, d_h), (TP, CP), "toy", ("mla_up",)),
        Part("v", "v", (B_a, b, s, n_kv, d_h), (TP, CP), "toy", ("mla_up",)),
        Part("softmax", "softmax output", (B_a, b, n_h, s ** 2), (TP, CP), "toy", ("score", "eager", "softmax_out")),
        Part("score_mask", "dropout mask", (B_k, b, n_h, s ** 2), (TP, CP), "toy", ("score", "mask", "eager")),
        Part("score_dropout", "dropout output", (B_a, b, n_h, s ** 2), (TP, CP), "toy",
             ("score", "eager", "probs", "dropout_out")),
        Part("softmax_stats", "log-sum-exp", (4, b, n_h, s), (TP, CP), "toy", ("score", "flash")),
        Part("attn_out", "attention output", (B_a, b, s, n_h, d_h), (TP, CP), "toy", ("e5m6",)),
        Part("out_mask", "dropout mask after W^O", (B_k, b, s, h), (SP, CP), "toy", ("mask",)),
    )


SPECS = {"gqa": gqa_specs, "dense": dense_specs, "head": head_specs}


def specs(kind, flags):
    return SPECS[kind]()
