"""Sec. 6: temporary buffers and fragmentation.

The paper gives no formula, only ranges: fragmentation adds 5% to 30% of allocated
memory and communication buffers take about 0.8 to 2 GB (GiB) per device.  We model the
peak as ``(1 + f_frag) (model states + activations) + M_buf`` with f_frag and M_buf
symbols whose defaults are the ends of those ranges.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from derivations.notation import M_buf, f_frag
from symbolic.term import Part, Term

GiB = 2 ** 30
#: The paper's ranges (Sec. 6): (low, high).
RANGES = {
    "f_frag": (Fraction(1, 20), Fraction(3, 10)),
    "M_buf": (Fraction(4, 5) * GiB, 2 * GiB),
}

M_alloc = sp.Symbol("M_alloc", positive=True)  # allocated bytes (model states + activations)


def terms(reg, *, q_lora, routing_bias, tied):
    yield Term("overhead.fragmentation", "bytes lost to fragmentation, f_frag times the allocated bytes", "bytes",
               "Sec. 6 (5%-30%)", (Part("frag", "fragmentation", (f_frag, M_alloc)),))
    yield Term("overhead.buffers", "communication and temporary buffers per device", "bytes",
               "Sec. 6 (0.8-2 GB)", (Part("buf", "buffers", (M_buf,)),))


def overheads(allocated: int, f: Fraction, buf: Fraction) -> dict:
    """Exact overheads for an allocation (bytes)."""
    frag = Fraction(allocated) * f
    return {"fragmentation": frag, "buffers": Fraction(buf), "peak": Fraction(allocated) + frag + Fraction(buf)}
