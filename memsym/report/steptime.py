"""The report's step-time table (issue 29): derivations/steptime/model.py's expressions in LaTeX, no number (their
values are ``memsym estimate --time``'s)."""
from __future__ import annotations

import sympy as sp

from .blocks import A, C, M, T, Table
from .equations import breakable_latex


def table_steptime(ctx) -> Table:
    from derivations.steptime import model as M_
    F_mm, F_att, F_rs = (sp.Symbol(n, nonnegative=True) for n in ("F_mm", "F_att", "F_rs"))
    f = M_.flops()
    mem = M_.memory_bytes()
    t = M_.times({"layers": F_mm, "attention": F_att, "head": 0, "rescore": F_rs},
                 {k: sp.Symbol(k, positive=True) for k in mem})
    names = ctx.names  # the model's own symbols print as sympy prints them (F_mm as F_{mm}, chi_mb as \chi_{mb})
    note = ("Exposed transfers follow the overlap switch (none, megatron, ideal; DualPipe also hides the EP and PP "
            "transfers of its paired chunks); m micro-batches per step. Values at a configuration: memsym estimate "
            "--time; memsym search ranks layouts by them.")
    t_mb, t_B, t_W = sp.Symbol("t_mb", positive=True), sp.Symbol("t_B", positive=True), sp.Symbol("t_W", positive=True)
    m = sp.Symbol("m", positive=True)
    rows_spec = [
        ("forward FLOPs, matrix products (incl. the head)", "F_mm", f["layers"] + f["head"]),
        ("forward FLOPs, attention scores", "F_att", f["attention"]),
        ("backward FLOPs, scores a flash kernel recomputes", "F_rs", f["rescore"]),
        ("bytes per token of the memory-bound operations, forward", "M_F", mem["M_F"]),
        ("and backward", "M_B", mem["M_B"]),
        ("forward", "t_F", t["t_F"]),
        ("backward", "t_B", t["t_B"]),
        ("its weight-gradient half", "t_W", t["t_W"]),
        ("recomputation", "t_R", t["t_R"]),
        ("compute of the step", "compute", m * (sp.Symbol("t_F") + t_B)),
        ("recomputation of the step", "recompute", m * sp.Symbol("t_R")),
        ("TP transfers", "c_TP", t["c_TP"]),
        ("EP dispatch and combine", "c_EP", t["c_EP"]),
        ("CP ring", "c_CP", t["c_CP"]),
        ("PP sends", "c_PP", t["c_PP"]),
        ("data-parallel traffic (per step)", "t_DP", t["t_DP"]),
        ("optimizer step", "t_opt", t["t_opt"]),
        ("bubble (t_mb: a micro-batch's compute and exposed transfers)", "bubble",
         M_.chi_mb * t_mb + M_.chi_B * t_B - M_.chi_W * t_W),
    ]
    rows = tuple((T(label), C(sym), M(breakable_latex(expr, names))) for label, sym, expr in rows_spec) + \
        ((T("step"), C("step"), M(r"m\,t_{mb} + \mathrm{bubble} + t_{DP}^{exposed} + t_{opt}")),)
    return Table("steptime", "The step-time model: each part as derivations/steptime/model.py writes it", "memsym",
                 ("part", "symbol", "expression"), A("p.25 l p.55"), rows, note=note)
