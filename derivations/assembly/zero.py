"""Sec. 4: ZeRO (Tables 7-8). Bytes per element are Table 7's symbols (B_w, B_g, B_m, B_1, B_2); P_n shards over DP, P_m
over EDP:

  none          weights B_w(P_n+P_m), grads B_g(P_n+P_m), optimizer (B_m+B_1+B_2)(P_n+P_m)
  os            optimizer sharded: (B_m+B_1+B_2)(P_n/DP + P_m/EDP)
  os+g          gradients sharded too
  os+g+params   weights sharded too"""
from __future__ import annotations


from derivations.assembly.sides import SHARDED_FROM, component_ids
from derivations.notation import B_1, B_2, B_g, B_m, B_w, CP, DP, EDP
from symbolic.term import Part, Term

COMPONENTS = (
    ("weights", "weights", (B_w,), "Table 7: BF16 weights"),
    ("gradients", "gradients", (B_g,), "Table 7: FP32 gradients"),
    ("optimizer", "optimizer states (master copy, momentum, variance)", (B_m + B_1 + B_2,),
     "Table 7: FP32 master + BF16 momentum + BF16 variance"),
)


def component_terms(zero_stage: int):
    """{component: term id} of the paper's terms for a ZeRO stage (0-3)."""
    return component_ids("zero", zero_stage)


def sharding_terms(prefix, P_n, P_m, provenance="Sec. 4, Table 8", non_moe_over=(DP, CP)):
    """``<prefix>.<component>.<replicated|sharded>`` for P_n (over ``non_moe_over``, default DP CP: the paper's DP, as
    it has CP = 1) and P_m (over EDP; None: no experts)."""
    over_text = "DP" if tuple(non_moe_over) == (DP,) else "DP CP"
    for name, meaning, nbytes, dtype in COMPONENTS:
        moe = () if P_m is None else (Part("moe", "MoE P_m", nbytes + (P_m,)),)
        yield Term(f"{prefix}.{name}.replicated", f"bytes of {meaning} on one device without ZeRO sharding", "bytes",
                   f"{provenance} ({dtype})", (Part("non_moe", "non-MoE P_n", nbytes + (P_n,)),) + moe)
        moe = () if P_m is None else (Part("moe", "MoE P_m / EDP", nbytes + (P_m,), (EDP,)),)
        yield Term(f"{prefix}.{name}.sharded", f"bytes of {meaning} on one device, sharded by ZeRO "
                                               f"(P_n over {over_text}" + (")" if P_m is None else ", P_m over EDP)"),
                   "bytes", f"{provenance}, ZeRO-{SHARDED_FROM[name]}+ ({dtype})",
                   (Part("non_moe", f"non-MoE P_n / {over_text}", nbytes + (P_n,), tuple(non_moe_over)),) + moe)


def terms(reg, family, flags):
    moe = reg["static.device.moe"].expr if "static.device.moe" in reg else None
    yield from sharding_terms("zero", reg["static.device.non_moe"].expr, moe)
