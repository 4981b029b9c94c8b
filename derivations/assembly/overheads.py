"""Sec. 6: temporary buffers and fragmentation. The paper gives ranges only (fragmentation 5% to 30% of allocated
memory, buffers 0.8 to 2 GB per device): peak = ``(1 + f_frag) (model states + activations) + M_buf`` at their ends."""
from __future__ import annotations

from fractions import Fraction

from derivations.config.values import symbol_keyed
from symbolic.errors import ConfigError
from symbolic.units import GiB

#: The paper's ranges (Sec. 6): (low, high).
RANGES = {
    "f_frag": (Fraction(1, 20), Fraction(3, 10)),
    "M_buf": (Fraction(4, 5) * GiB, 2 * GiB),
}


def terms(reg, family, flags):
    """``overhead.fragmentation`` and ``overhead.buffers``."""
    # lazy: sympy (estimate/params import no sympy)
    import sympy as sp

    from derivations.notation import M_buf, f_frag
    from symbolic.term import Part, Term
    alloc = sp.Symbol("M_alloc", positive=True)  # allocated bytes (model states + activations)
    yield Term("overhead.fragmentation", "bytes lost to fragmentation, f_frag times the allocated bytes", "bytes",
               "Sec. 6 (5%-30%)", (Part("frag", "fragmentation", (f_frag, alloc)),))
    yield Term("overhead.buffers", "communication and temporary buffers per device", "bytes",
               "Sec. 6 (0.8-2 GB)", (Part("buf", "buffers", (M_buf,)),))


#: Which end of the Sec. 6 ranges: high (30%, 2 GiB; conservative), low (5%, 0.8 GiB) or none.
ENDS = ("high", "low", "none")


def named_values(end: str = "high") -> dict:
    """{'f_frag': ..., 'M_buf': ...} at one end of the Sec. 6 ranges (exact Fractions); 'none' is zero."""
    if end not in ENDS:
        raise ConfigError("overheads", f"overheads must be one of {', '.join(ENDS)}, got {end!r}")
    if end == "none":
        return {"f_frag": 0, "M_buf": 0}
    i = 0 if end == "low" else 1
    return {"f_frag": RANGES["f_frag"][i], "M_buf": RANGES["M_buf"][i]}


def overhead_values(end: str = "high") -> dict:
    """{f_frag: ..., M_buf: ...} at one end of the Sec. 6 ranges, keyed by symbol (:func:`named_values`)."""
    return symbol_keyed(named_values(end))


def peak(allocated, f=None, buf=None):
    """The Sec. 6 peak ``(1 + f_frag) * allocated + M_buf``: exact, symbolic or element-wise."""
    if f is None or buf is None:
        # lazy: sympy (estimate/params import no sympy)
        from derivations.notation import M_buf, f_frag
        f, buf = f_frag if f is None else f, M_buf if buf is None else buf
    return (1 + f) * allocated + buf


def at_ends(allocated) -> dict:
    """{low, high: {f_frag, fragmentation, buffers, peak}} for an allocation (exact bytes)."""
    out = {}
    for end in ("low", "high"):
        o = named_values(end)
        f, buf = o["f_frag"], o["M_buf"]
        out[end] = {"f_frag": f, "fragmentation": allocated * f, "buffers": buf, "peak": peak(allocated, f, buf)}
    return out
