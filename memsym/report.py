"""The report model: the paper's sections as data (tables, equations, paragraphs).

``build_report(ctx)`` walks :data:`SECTIONS` (the paper's order: notation, Table 2, Tables
3-4, Table 6, Table 8, Tables 9-10, Sec. 6, then the comparison with every printed
number) and returns a :class:`Report` that the Jinja templates in ``templates/`` render to
LaTeX, Markdown and HTML, and that :mod:`memsym.notebook` turns into notebooks.

Nothing here does maths beyond evaluating terms: every formula is a term's own sympy
expression printed by sympy (``Term.display`` for the paper's factored form, the
simplified closed form, the exact value at the configuration).  Sections list the terms
they show by id prefix, so a term added under ``act.`` (a recomputation variant) or any
new prefix (caught by the "other terms" section) appears without touching a template.

A :class:`Context` is one configuration (model, layout, training, stage) plus the full
substitution; a user may override any symbol in ``ctx.subs`` (notebooks do) and the
equations and term tables follow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import sympy as sp

from derivations import config as cfg
from derivations import notation as nt
from symbolic.render import braced, closed_expr, latex_of, report_names

#: Roles of the symbols substituted in the paper's factored form: the parallel layout
#: (Table 5) and bytes per element (Table 7); model dimensions stay symbols.
DISPLAY_ROLES = ("parallel", "bytes")
STAGE_ROLE = "stage"
#: Paper forms longer than this (LaTeX characters) are printed with sympy's long_frac_ratio.
LONG_FORM = 600
#: Closed forms longer than this are printed with sympy's long_frac_ratio.
LONG_CLOSED = 150
ZERO_ORDER = (0, 1, 2, 3)


# ------------------------------------------------------------------------------ blocks
@dataclass(frozen=True)
class Cell:
    """One table cell or paragraph segment.

    kind: 'text' (plain text, escaped per format), 'math' (LaTeX from sympy or the
    notation registry), 'code' (an identifier such as a term id), 'int' (an exact number,
    formatted with thousands separators), 'gib' (bytes shown as GiB), 'blank'.
    """

    kind: str
    value: object = ""


def A(spec: str) -> Tuple[str, ...]:
    """Column alignments from ``"l p.30 r"``."""
    return tuple(spec.split())


def T(x) -> Cell:
    return Cell("text", str(x))


def M(x) -> Cell:
    return Cell("math", str(x))


def C(x) -> Cell:
    return Cell("code", str(x))


def I(x) -> Cell:  # noqa: E743
    return Cell("int", Fraction(x)) if x is not None else Cell("blank")


def G(x) -> Cell:
    return Cell("gib", Fraction(x)) if x is not None else Cell("blank")


@dataclass(frozen=True)
class Paragraph:
    segments: Tuple[Cell, ...]
    kind: str = "paragraph"

    def _repr_markdown_(self) -> str:
        return render_block(self, "md")


@dataclass(frozen=True)
class Table:
    """A table: ``columns`` headers, ``rows`` of cells; ``align`` per column: 'l', 'r', or
    'p.NN' (a wrapping column NN% of the line wide in LaTeX; left-aligned elsewhere)."""

    key: str
    caption: str
    source: str
    columns: Tuple[str, ...]
    align: Tuple[str, ...]
    rows: Tuple[Tuple[Cell, ...], ...]
    note: str = ""
    kind: str = "table"

    def _repr_markdown_(self) -> str:
        return render_block(self, "md")


@dataclass(frozen=True)
class Equation:
    """One term in three forms: the paper's factored form, the closed form, the value.

    paper / closed: LaTeX printed by sympy with the notation's names; ``at`` the
    substitution applied to both (layout and bytes, and the stage composition for
    per-device terms), as LaTeX; ``uses`` the named terms the paper's form refers to
    (``M_1^A`` in Table 10) as (LaTeX symbol, term id); ``value`` exact (params or
    bytes), None when the term has symbols no configuration sets (Sec. 6).
    """

    term_id: str
    symbol: str
    meaning: str
    provenance: str
    unit: str
    paper: str
    closed: str
    at: Tuple[Tuple[str, str], ...]
    uses: Tuple[Tuple[str, str], ...]
    value: Optional[Fraction]
    value_bytes: Optional[Fraction]
    parts: Tuple[Tuple[Cell, ...], ...] = ()
    at_stage: bool = False
    kind: str = "equation"

    @property
    def lhs(self) -> str:
        return self.symbol or r"\mathrm{" + self.term_id.replace("_", r"\_") + "}"

    def _repr_markdown_(self) -> str:
        return render_block(self, "md")


@dataclass
class Section:
    key: str
    number: int
    title: str
    source: str
    blocks: List
    notebook: bool = True


@dataclass
class Report:
    title: str
    subtitle: str
    model: str
    setting: Tuple[Tuple[str, str], ...]
    sections: List[Section]
    notebooks: Tuple[Tuple[str, str], ...] = ()   # (file stem, section key), for links


# ------------------------------------------------------------------------------ context
@dataclass
class Context:
    """One configuration: the model, the layout, the training settings and the stage."""

    model: cfg.ModelSpec
    layout: cfg.Layout
    training: cfg.Training
    stage: cfg.StageComposition
    subs: Dict = field(repr=False)
    model_ref: str = ""          # how to load the model again (preset name or config path), for notebooks
    _terms: object = field(default=None, repr=False)

    @classmethod
    def create(cls, model=None, layout=None, training=None, stage: int = 1) -> "Context":
        """Validate and build the context (ConfigError names a failing constraint).

        ``model``: a ModelSpec, a preset name or a Hugging Face config.json path."""
        import os
        ref = model if isinstance(model, str) else getattr(model, "name", "deepseek-v3")
        if isinstance(model, str) and model not in cfg.PRESETS and os.path.exists(model):
            ref = os.path.abspath(model)
        model = cfg.load_model(model) if isinstance(model, str) else (model or cfg.load_model("deepseek-v3"))
        layout = layout or cfg.Layout()
        training = training or cfg.Training()
        cfg.validate_layout(model, layout, training.seq)
        cfg.validate_training(training)
        comp = cfg.stage(model, layout, stage)
        return cls(model, layout, training, comp, cfg.substitution(model, layout, training, comp), ref)

    @property
    def terms(self):
        if self._terms is None:
            from derivations import configured
            self._terms = configured(self.model, self.training)  # this configuration's terms only
        return self._terms

    @property
    def names(self) -> Dict:
        return report_names()

    def value_of(self, sym):
        """Exact value of a symbol at this configuration (derived symbols evaluated), or None."""
        from symbolic.numeric import exact
        if sym in self.subs:
            return Fraction(self.subs[sym])
        if sym in nt.DEFINITIONS:
            try:
                return exact(nt.DEFINITIONS[sym], self.subs)
            except cfg.ConfigError:
                return None
        return None

    def subs_for(self, term) -> Dict:
        """The substitution a term is evaluated at: this stage's, or for a term of scope
        'model' (Megatron's shard, which divides by PP itself) the whole model's, with D the
        MTP layers only under --mtp (derivations.conventions.megatron_substitution)."""
        if getattr(term, "scope", "stage") != "model":
            return self.subs
        from derivations.conventions import megatron_substitution
        return megatron_substitution(self.model, self.layout, self.training)

    def display_subs(self, with_stage: bool, subs: Optional[Dict] = None) -> Dict:
        """The substitution for the paper's factored form: parallel degrees and bytes per
        element (EDP included), plus the stage composition for per-device terms."""
        roles = DISPLAY_ROLES + ((STAGE_ROLE,) if with_stage else ())
        subs = self.subs if subs is None else subs
        out = {k: v for k, v in subs.items() if k.name in nt.REGISTRY and nt.REGISTRY[k.name].role in roles}
        edp = self.value_of(nt.EDP)
        if edp is not None:
            out[nt.EDP] = sp.Rational(edp.numerator, edp.denominator)
        if self.model.d_v == self.model.d_h:  # the paper writes d_h for the value head dimension
            out[nt.d_v] = nt.d_h
        return out

    def exact(self, term_or_expr, subs: Optional[Dict] = None) -> Optional[Fraction]:
        from symbolic.numeric import exact
        try:
            return exact(term_or_expr, self.subs if subs is None else subs)
        except cfg.ConfigError:
            return None

    # convenience for notebooks ------------------------------------------------------
    def equation(self, term_id: str, with_stage: Optional[bool] = None, parts: bool = False) -> Equation:
        """The equation block of a term (paper form, closed form, value)."""
        term = self.terms[term_id]
        if with_stage is None:
            with_stage = any(s in term.base_expr.free_symbols for s in (nt.L_d, nt.L_m, nt.e_E, nt.e_H)) and \
                not term_id.startswith("params.")
        return equation(self, term, with_stage, parts)

    def table(self, key: str) -> Table:
        """A table by key (see :data:`TABLES`)."""
        if key not in TABLES:
            raise KeyError(f"unknown table {key!r}; tables: {', '.join(TABLES)}")
        return TABLES[key](self)


# ------------------------------------------------------------------------------ equations
def _named_symbols(ctx: Context, exclude: str):
    """Terms the paper refers to by name (Term.symbol: M_1^A, P_n ...) as display symbols."""
    by_id, by_expr, latex = {}, {}, {}
    for t in ctx.terms.values():
        if t.symbol and t.id != exclude:
            sym = sp.Symbol("term:" + t.id, positive=True)
            by_id[t.id] = sym
            by_expr.setdefault(t.expr, sym)
            latex[sym] = (braced(t.symbol), t.id)
    return by_id, by_expr, latex


def _named_view(ctx: Context, term):
    """``term`` with factors that are whole named terms replaced by their symbols (display only):
    ``(L_d + L_m) M_1^A`` rather than the expanded M_1^A inside Table 10's stage term."""
    by_id, by_expr, latex = _named_symbols(ctx, term.id)
    used, parts = {}, []
    for p in term.parts:
        refs = [t[4:] for t in p.tags if t.startswith("ref:")]
        num = list(p.num)
        for i, f in enumerate(num):
            f = sp.sympify(f)
            if refs:
                sym = by_id.get(refs[0]) if f == ctx.terms[refs[0]].expr else None
            else:
                sym = by_expr.get(f)
            if sym is not None:
                num[i] = sym
                used[sym] = latex[sym]
        parts.append(replace(p, num=tuple(num)))
    view = replace(term, parts=tuple(parts))
    return view, used


def _at(ctx: Context, subs: Dict, term) -> Tuple[Tuple[str, str], ...]:
    names = ctx.names
    free = term.expr.free_symbols | term.base_expr.free_symbols
    rows = [(names.get(k, str(k)), _fmt_num(v)) for k, v in subs.items()
            if k in free and sp.sympify(v).is_number]  # identities such as d_v = d_h are not values
    return tuple(sorted(rows, key=lambda r: _order_key(r[0])))


def _order_key(latex: str):
    order = {braced(nt.REGISTRY[n].latex): i for i, n in enumerate(nt.PAPER_FACTOR_ORDER) if n in nt.REGISTRY}
    return (order.get(latex, 99), latex)


def _fmt_num(v) -> str:
    f = Fraction(int(v.p), int(v.q)) if isinstance(v, sp.Rational) else Fraction(v)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def _breakable_latex(expr, names) -> str:
    """LaTeX of a closed form; a long one with sympy's long_frac_ratio, so that
    ``\\frac{b s}{2} \\left(...\\right)`` can break across lines where a long fraction cannot."""
    text = latex_of(expr, names)
    return text if len(text) <= LONG_CLOSED else latex_of(expr, names, long_frac_ratio=2)


def equation(ctx: Context, term, with_stage: bool, show_parts: bool = False) -> Equation:
    """The three forms of a term at ``ctx`` (see :class:`Equation`)."""
    full = ctx.subs_for(term)
    dsubs = ctx.display_subs(with_stage, full)
    view, used = _named_view(ctx, term)
    names = dict(ctx.names)
    names.update({sym: lx for sym, (lx, _) in used.items()})
    shown = view.display(dsubs, full)
    paper = sp.latex(shown, order="none", symbol_names=names)
    if len(paper) > LONG_FORM:  # print long fractions as \frac{..}{..} (...) so LaTeX can break them
        paper = sp.latex(shown, order="none", symbol_names=names, long_frac_ratio=2)
    closed = _breakable_latex(closed_expr(term, dsubs), ctx.names)
    value = ctx.exact(term, full)
    value_bytes = None
    if value is not None:
        value_bytes = value * Fraction(full.get(nt.B_w, 2)) if term.unit == "params" else value
    parts = ()
    if show_parts:
        rows = []
        for p, shown_part in zip(term.parts, view.parts):
            shown = shown_part.display(dsubs, full)
            if shown == 0:
                continue  # a row this stage does not hold (L_d = 0 ...)
            shown = sp.latex(shown, order="none", symbol_names=names)
            v = ctx.exact(p.expr, full)
            rows.append((T(p.label), M(shown), I(v)))
        parts = tuple(rows)
    return Equation(term.id, braced(term.symbol) if term.symbol else "", term.meaning, term.provenance, term.unit,
                    paper, closed, _at(ctx, dsubs, term), tuple(used.values()), value, value_bytes, parts,
                    with_stage)


# ------------------------------------------------------------------------------ paragraphs
_REF = re.compile(r"\{(sym|term):([A-Za-z0-9_.]+)\}")


def para(ctx: Context, text: str) -> Paragraph:
    """A paragraph of prose; ``{sym:d_cq}`` becomes the registry's LaTeX for the symbol,
    ``{term:act.mla.layer}`` the term's symbol (M_1^A)."""
    segs, pos = [], 0
    for m in _REF.finditer(text):
        if m.start() > pos:
            segs.append(T(text[pos:m.start()]))
        kind, name = m.groups()
        if kind == "sym":
            segs.append(M(braced(nt.REGISTRY[name].latex)))
        else:
            t = ctx.terms[name]
            segs.append(M(braced(t.symbol)) if t.symbol else C(t.id))
        pos = m.end()
    if pos < len(text):
        segs.append(T(text[pos:]))
    return Paragraph(tuple(segs))


# ------------------------------------------------------------------------------ tables
def _gib_of_params(ctx, params):
    return None if params is None else params * Fraction(ctx.subs.get(nt.B_w, 2))


def table_notation(ctx: Context) -> Table:
    rows = []
    for name, info in nt.REGISTRY.items():
        val = ctx.value_of(nt.SYMBOLS[name])
        rows.append((M(braced(info.latex)), C(name), T(info.meaning), T(info.role), T(info.source), I(val)))
    return Table("notation", "Notation: every symbol of the registry, with its value at this configuration",
                 "Table 1 (+ Tables 5, 7, 9 and extensions)", ("symbol", "name", "meaning", "role", "source", "value"),
                 A("l l p.34 l p.18 r"), tuple(rows))


def table_matrices(ctx: Context) -> Table:
    rows = []
    for tid in ("params.mla", "params.expert", "params.router", "params.dense_ffn"):
        term = ctx.terms[tid]
        for p in term.parts:
            rule = "split by TP" if "tp_split" in p.tags else "replicated" if "replicated" in p.tags else ""
            shown = sp.latex(p.display(), order="none", symbol_names=ctx.names)
            rows.append((T(p.label), M(shown), I(ctx.exact(p.expr)), T(rule), C(tid)))
    return Table("table2", "MLA, expert, router and dense-FFN matrices: size and tensor-parallel rule", "Table 2",
                 ("matrix", "size", "parameters", "TP rule (Sec. 3)", "term"), A("p.36 l r l l"), tuple(rows))


def _layer_groups(model: cfg.ModelSpec):
    """Consecutive layers of the same kind and role (embedding / head), as Table 3 groups them."""
    kinds, groups = model.layer_kinds(), []
    for i, k in enumerate(kinds):
        key = (k, i == 0, i == model.l - 1)
        if groups and groups[-1][0] == key:
            groups[-1][2] = i
        else:
            groups.append([key, i, i])
    return groups


def table_layers(ctx: Context) -> Table:
    from symbolic.numeric import exact
    term = ctx.terms["params.stage"]
    rows = []
    for (kind, first, last), a, b in _layer_groups(ctx.model):
        comp = cfg.layer_range(ctx.model, a, a)
        content = (["embedding"] if first else []) + ["MLA", "dense FFN" if kind == "dense" else
                                                       f"router + {ctx.model.N} + {ctx.model.N_s} experts", "LN"] + \
                  (["output head"] if last else [])
        p = exact(term, cfg.substitution(ctx.model, None, ctx.training, comp))
        label = f"{a}" if a == b else f"{a}-{b} (each)"
        rows.append((T(label), T(" + ".join(content)), I(p), G(_gib_of_params(ctx, p))))
    whole = cfg.whole_model(ctx.model)
    total = exact(term, cfg.substitution(ctx.model, None, ctx.training, whole))
    rows.append((T("total"), T(f"{ctx.model.l} layers"), I(total), G(_gib_of_params(ctx, total))))
    return Table("table3", "Parameters per layer (term params.stage at one layer's composition)", "Table 3",
                 ("layers", "content", "parameters", "GiB (weights)"), A("l p.45 r r"), tuple(rows))


def table_stages(ctx: Context) -> Table:
    from derivations.device import stage_params
    rows_, total = stage_params(ctx.model, ctx.layout)
    rows = []
    for comp, p, _ in rows_:
        content = ", ".join((["embedding"] if comp.embedding else []) + ([f"{comp.dense} dense"] if comp.dense else [])
                            + ([f"{comp.moe} MoE"] if comp.moe else []) + (["head"] if comp.head else []))
        rows.append((T(comp.index), T(comp.label), T(content), I(p), G(_gib_of_params(ctx, p))))
    rows.append((T("all"), T(""), T(""), I(total), G(_gib_of_params(ctx, total))))
    return Table("table4", f"Parameters per pipeline stage at PP = {ctx.layout.pp}", "Table 4",
                 ("stage", "layers", "content", "parameters", "GiB (weights)"), A("l l l r r"), tuple(rows))


def table_layout(ctx: Context) -> Table:
    lay = ctx.layout
    rows = [(M(braced(nt.REGISTRY[n].latex)), T(nt.REGISTRY[n].meaning), I(ctx.value_of(nt.SYMBOLS[n])))
            for n in ("DP", "TP", "PP", "EP", "ETP", "EDP", "SP", "CP")]
    rows.append((T("GPUs"), T("DP TP PP CP"), I(lay.world)))
    return Table("table5", "Parallel layout", "Table 5", ("symbol", "meaning", "value"), A("l l r"),
                 tuple(rows))


def table_static(ctx: Context) -> Table:
    rows = []
    for tid, term in ctx.terms.items():
        if tid.startswith("static.device."):
            p = ctx.exact(term)
            rows.append((T(term.meaning), C(tid), I(p), I(_gib_of_params(ctx, p)), G(_gib_of_params(ctx, p))))
    st = ctx.stage
    return Table("table6", f"Parameters on one device of stage {st.index} ({st.label})", "Table 6",
                 ("module", "term", "parameters", "bytes", "GiB"), A("p.3 l r r r"), tuple(rows))


def table_bytes(ctx: Context) -> Table:
    rows = [(M(braced(nt.REGISTRY[k].latex)), T(nt.REGISTRY[k].meaning), I(v)) for k, v in ctx.training.bytes]
    return Table("table7", "Bytes per element", "Table 7", ("symbol", "meaning", "bytes"), A("l p.5 r"),
                 tuple(rows))


def table_zero(ctx: Context) -> Table:
    from derivations.zero import component_terms
    rows = []
    for z in ZERO_ORDER:
        ids = component_terms(z)
        vals = [ctx.exact(ctx.terms[ids[k]]) for k in ("weights", "gradients", "optimizer")]
        total = None if None in vals else sum(vals)
        rows.append((T(f"{z} ({cfg.ZERO_NAMES[z]})"), *[G(v) for v in vals], G(total), I(total)))
    return Table("table8", f"Model states per device of stage {ctx.stage.index} under each ZeRO stage (GiB)",
                 "Table 8", ("ZeRO", "weights", "gradients", "optimizer", "total", "total bytes"), A("l r r r r r"),
                 tuple(rows))


def table_activation_setting(ctx: Context) -> Table:
    rows = [(M(braced(nt.REGISTRY[n].latex)), T(nt.REGISTRY[n].meaning), I(ctx.value_of(nt.SYMBOLS[n])))
            for n in ("b", "s", "N_r", "N", "E_token", "SP", "CP", "EP", "ETP")]
    rows.append((T("AC"), T("activation recomputation (this configuration)"), T(ctx.training.recompute)))
    return Table("table9", "Activation setting", "Table 9", ("symbol", "meaning", "value"), A("l p.5 r"),
                 tuple(rows))


def _stage_variants(ctx: Context) -> List[str]:
    """``act.stage`` and its variants (``act.stage.full`` and any added later), registry order."""
    return [tid for tid in ctx.terms if tid == "act.stage" or tid.startswith("act.stage.")]


def table_activations(ctx: Context) -> Table:
    """Table 10: each row of ``act.stage`` (and its variants) at the stage composition, as the
    paper prints it: the per-layer term at the layout, times the number of layers, expanded."""
    dsubs = ctx.display_subs(True)
    ident = dict(nt.PAPER_IDENTITIES) if ctx.model.d_v == ctx.model.d_h else {}
    rows = []
    for vid in _stage_variants(ctx):
        stage_term = ctx.terms[vid]
        policy = vid[len("act.stage"):].lstrip(".") or "none"
        for p in stage_term.parts:
            refs = [t[4:] for t in p.tags if t.startswith("ref:")]
            if not refs:
                continue
            sub = ctx.terms[refs[0]]
            coef = sp.sympify(p.num[0]).xreplace(dsubs) if len(p.num) == 2 else sp.Integer(1)
            if coef == 0:
                continue
            per_layer = sp.Add(*[c * sp.Mul(*rest) / den for c, rest, den in sub.rows(dsubs, ctx.subs)])
            shown = _breakable_latex(sp.expand((coef * per_layer).xreplace(ident)), ctx.names)
            v = ctx.exact(p.expr)
            rows.append((T(p.label), T(policy), M(shown), I(v), G(v)))
        total = ctx.exact(stage_term)
        rows.append((T("total"), T(policy), C(vid), I(total), G(total)))
    st = ctx.stage
    note = "d_v written d_h as the paper does." if ident else ""
    return Table("table10", f"Activations of one micro-batch on one device of stage {st.index} ({st.label}), "
                            f"by recomputation policy", "Table 10",
                 ("module", "AC", "formula at the layout", "bytes", "GiB"), A("l l p.45 r r"), tuple(rows), note)


def table_estimate(ctx: Context) -> Table:
    from derivations.device import estimate
    est = estimate(ctx.model, ctx.layout, ctx.training, ctx.stage.index)
    rows = [(T(k), C(est.term_ids[k]), I(est.bytes[k]), G(est.bytes[k]))
            for k in ("weights", "gradients", "optimizer", "activations")]
    rows.append((T("total"), T(""), I(est.bytes["total"]), G(est.bytes["total"])))
    rows += [(T("convention"), T(a[len("convention "):]), T(""), T(""))  # issue 8: switches not at the paper's
             for a in est.assumptions if a.startswith("convention ")]
    tr = ctx.training
    return Table("estimate", f"Per-device memory at this configuration (ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}), "
                             f"recompute {tr.recompute}, b = {tr.mbs}, s = {tr.seq})", "memsym estimate",
                 ("component", "term", "bytes", "GiB"), A("l l r r"), tuple(rows))


def table_overheads(ctx: Context) -> Table:
    from derivations.device import estimate
    est = estimate(ctx.model, ctx.layout, ctx.training, ctx.stage.index)
    rows = []
    for end in ("low", "high"):
        o = est.overheads[end]
        rows.append((T(end), T(f"{float(o['f_frag']) * 100:.0f}%"), G(est.bytes["total"]), G(o["fragmentation"]),
                     G(o["buffers"]), G(o["peak"])))
    return Table("overheads", "Peak per device at both ends of the paper's ranges (GiB)", "Sec. 6",
                 ("end", "fragmentation", "allocated", "+ fragmentation", "+ buffers", "peak"), A("l r r r r r"),
                 tuple(rows))


def table_comparison(ctx: Context) -> Table:
    from derivations.reproduce import run
    rows = []
    for r in run():
        unit = {"B": "", "GB": " GB", "params": "", "bytes": ""}[r.entry.unit]
        printed = r.entry.printed + ("" if r.entry.printed.endswith("B") or r.entry.unit != "GB" else unit)
        derived = r.derived_text() + ("B" if r.entry.unit == "B" else unit)
        rows.append((T(r.entry.place), T(printed), T(derived), T(r.status), T(r.entry.discrepancy),
                     C(", ".join(r.entry.terms))))
    return Table("comparison", "Every printed number of the paper against memsym (paper's configuration)",
                 "paper/printed.toml", ("place", "printed", "derived", "status", "cause", "term"), A("p.2 l l l p.22 p.15"),
                 tuple(rows))


#: Where each table is in the paper (for notebook cells, without building the table).
TABLE_SOURCES = {"notation": "Table 1", "table2": "Table 2", "table3": "Table 3", "table4": "Table 4",
                 "table5": "Table 5", "table6": "Table 6", "table7": "Table 7", "table8": "Table 8",
                 "table9": "Table 9", "table10": "Table 10", "estimate": "memsym estimate", "overheads": "Sec. 6",
                 "comparison": "paper/printed.toml"}

TABLES: Dict[str, Callable[[Context], Table]] = {
    "notation": table_notation, "table2": table_matrices, "table3": table_layers, "table4": table_stages,
    "table5": table_layout, "table6": table_static, "table7": table_bytes, "table8": table_zero,
    "table9": table_activation_setting, "table10": table_activations, "estimate": table_estimate,
    "overheads": table_overheads, "comparison": table_comparison,
}


# ------------------------------------------------------------------------------ sections
@dataclass(frozen=True)
class SectionSpec:
    """A section of the report: its blocks in order.  A block is a table key, ``"terms"``
    (the equations of every term whose id matches ``prefixes`` and no earlier section),
    or ``"p:<text>"`` (prose; see :func:`para`)."""

    key: str
    title: str
    source: str
    blocks: Tuple[str, ...]
    prefixes: Tuple[str, ...] = ()
    at_stage: bool = False
    parts: bool = False
    notebook: bool = True


SECTIONS: Tuple[SectionSpec, ...] = (
    SectionSpec("setting", "Configuration", "Tables 5, 7, 9", (
        "p:The model, parallel layout and training settings of this report, and the resulting memory of one device "
        "of the chosen stage. Every number below is evaluated exactly from the terms (integers and rationals); "
        "GiB means 2^30 bytes (the paper's GB).", "estimate")),
    SectionSpec("notation", "Notation", "Table 1", (
        "p:Symbols as the paper writes them, from the notation registry; derived symbols ({sym:E_token}, "
        "{sym:EDP}) are evaluated from their definitions.", "notation")),
    SectionSpec("matrices", "MLA and expert matrices", "Sec. 1, Table 2", (
        "p:The projection matrices of Multi-head Latent Attention, one SwiGLU expert, the router and the dense FFN. "
        "The tensor-parallel rule is the paper's (Sec. 3): up- and output projections split by TP, down- and RoPE "
        "projections replicated.", "table2", "terms"),
        prefixes=("params.mla", "params.norm", "params.expert", "params.dense_ffn", "params.router",
                  "params.embedding", "params.head")),
    SectionSpec("parameters", "Parameters per layer and per stage", "Sec. 2, Tables 3-4", (
        "p:A pipeline stage holds {sym:L_d} dense and {sym:L_m} MoE layers, the embedding if {sym:e_E} = 1 and the "
        "head if {sym:e_H} = 1; Table 3's rows and Table 4's stages are substitutions of params.stage.",
        "table3", "table4", "terms"), prefixes=("params",)),
    SectionSpec("static", "Static parameters per device", "Sec. 3, Tables 5-6", (
        "table5", "table6",
        "p:Per-device terms are shown at the layout and at the chosen stage's composition; {term:static.device.non_moe} "
        "and {term:static.device.moe} are the non-MoE and MoE parameters of Sec. 4.", "terms"),
        prefixes=("static",), at_stage=True),
    SectionSpec("zero", "ZeRO", "Sec. 4, Tables 7-8", (
        "table7", "table8",
        "p:Non-MoE parameters {term:static.device.non_moe} (and their gradients and optimizer states) are sharded "
        "over {sym:DP}, MoE parameters {term:static.device.moe} over {sym:EDP}.", "terms"),
        prefixes=("zero",), at_stage=True),
    SectionSpec("activations", "Activations", "Sec. 5, Tables 9-10", (
        "table9",
        "p:Per-layer terms: {term:act.mla.layer} and {term:act.moe.layer} without recomputation, "
        "{term:act.mla.layer.full} and {term:act.moe.layer.full} with full recomputation; each with the tensors it "
        "keeps. Per-stage terms are shown at the chosen stage's composition.", "terms", "table10"),
        prefixes=("act",), at_stage=True, parts=True),
    SectionSpec("overheads", "Buffers and fragmentation", "Sec. 6", (
        "p:The paper gives ranges, not formulas: fragmentation adds 5% to 30% of the allocated memory and "
        "communication buffers take about 0.8 to 2 GiB per device. memsym reports both ends beside the total.",
        "overheads", "terms"), prefixes=("overhead",)),
    SectionSpec("other", "Other terms", "memsym", (
        "p:Terms not covered by the sections above (added by extensions), at the layout and the chosen stage.",
        "terms"), prefixes=("",), at_stage=True),
    SectionSpec("comparison", "The paper's printed numbers against memsym", "paper/printed.toml", (
        "p:Every number the paper prints, recomputed at the paper's configuration (DeepSeek-v3, DP32 TP2 PP16 EP8 "
        "ETP1), with its status: agrees (rounds to the printed value at its precision), discrepancy (a known "
        "cause, stated), UNEXPLAINED or stale (failures).", "comparison")),
)


def _matches(tid: str, prefix: str) -> bool:
    return prefix == "" or tid == prefix or tid.startswith(prefix + ".")


def section_term_ids(ctx: Context) -> Dict[str, List[str]]:
    """Term ids per section: each term goes to the first section whose prefixes match it."""
    out, claimed = {}, set()
    for spec in SECTIONS:
        ids = [tid for tid in ctx.terms if tid not in claimed and any(_matches(tid, p) for p in spec.prefixes)]
        claimed.update(ids)
        out[spec.key] = ids
    return out


@dataclass(frozen=True)
class Stub:
    """A table or equation named but not computed (the outline notebooks are built from)."""

    kind: str
    key: str = ""
    source: str = ""
    term_id: str = ""
    provenance: str = ""
    parts: bool = False
    at_stage: bool = False


def build_section(ctx: Context, spec: SectionSpec, number: int, term_ids: Sequence[str],
                  outline: bool = False) -> Section:
    blocks = []
    for b in spec.blocks:
        if b == "terms":
            for tid in term_ids:
                t = ctx.terms[tid]
                blocks.append(Stub("equation", term_id=tid, provenance=t.provenance, parts=spec.parts,
                                   at_stage=spec.at_stage) if outline
                              else equation(ctx, t, spec.at_stage, spec.parts))
        elif b.startswith("p:"):
            blocks.append(para(ctx, b[2:]))
        else:
            blocks.append(Stub("table", key=b, source=TABLE_SOURCES.get(b, "")) if outline else TABLES[b](ctx))
    return Section(spec.key, number, spec.title, spec.source, blocks, spec.notebook)


def build_report(ctx: Context, progress: Optional[Callable[[str], None]] = None, outline: bool = False) -> Report:
    """The whole report for a configuration (sections with no content are left out).

    ``outline=True``: tables and equations are :class:`Stub` s (no computation), enough to
    lay out the notebooks, which compute them when executed."""
    ids = section_term_ids(ctx)
    sections, n = [], 0
    for spec in SECTIONS:
        has_tables = any(b != "terms" and not b.startswith("p:") for b in spec.blocks)
        if spec.prefixes and not ids[spec.key] and not has_tables:
            continue  # a section of terms only, with none to show
        if progress and not outline:
            progress(f"section {spec.title}")
        n += 1
        sections.append(build_section(ctx, spec, n, ids.get(spec.key, ()), outline))
    lay, tr, st = ctx.layout, ctx.training, ctx.stage
    setting = (
        ("model", ctx.model.name),
        ("layout", f"DP={lay.dp} TP={lay.tp} PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp} "
                   f"(EDP={_fmt_num(lay.edp)}, {lay.world} GPUs)"),
        ("stage", f"{st.index} of {lay.pp} ({st.label}: {st.dense} dense, {st.moe} MoE"
                  f"{', embedding' if st.embedding else ''}{', head' if st.head else ''})"),
        ("training", f"b={tr.mbs} s={tr.seq} ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}) recompute {tr.recompute}"),
    )
    return Report(
        title=f"Training memory of {ctx.model.name}, derived symbolically",
        subtitle="A reproduction of P. Zhang, L. Su, Memory Analysis on the Training Course of DeepSeek Models "
                 "(arXiv:2502.07846), generated by memsym",
        model=ctx.model.name, setting=setting, sections=sections)


# ------------------------------------------------------------------------------ rendering
def render_block(block, fmt: str) -> str:
    """One block rendered alone (Markdown in notebooks)."""
    from symbolic.render import environment
    env = environment(fmt)
    macros = env.get_template(f"macros.{fmt}.j2")
    return getattr(macros.module, block.kind)(block)


def render(report: Report, fmt: str) -> str:
    """The report as ``tex``, ``md`` or ``html`` through ``templates/report.<fmt>.j2``."""
    from symbolic.render import environment
    return environment(fmt).get_template(f"report.{fmt}.j2").render(report=report)


# ------------------------------------------------------------------------------ publishing
FORMATS = ("tex", "md", "html", "ipynb", "pdf")
DEFAULT_FORMATS = FORMATS
#: TeX engines tried in order for ``--format pdf``.
TEX_ENGINES = ("pdflatex", "xelatex", "lualatex", "latexmk")


def default_out_dir():
    """``paper/build`` of the project (ignored by git)."""
    from symbolic.resources import build_dir
    return build_dir()


def parse_formats(text: str) -> Tuple[str, ...]:
    """``"tex,md"`` -> ('tex', 'md') in :data:`FORMATS` order; ConfigError names an unknown one."""
    items = [x.strip().lower() for x in str(text).split(",") if x.strip()]
    bad = [x for x in items if x not in FORMATS]
    if bad or not items:
        raise cfg.ConfigError("format", f"unknown report format {', '.join(map(repr, bad)) or repr(text)}: "
                                        f"use a comma-separated list of {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in items)


from symbolic.files import write_atomic  # noqa: E402  (re-exported: report.write_atomic)


class PdfError(RuntimeError):
    """The TeX engine failed on the generated ``.tex`` (a template bug, not bad input)."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def find_tex_engine() -> Optional[str]:
    import shutil
    for engine in TEX_ENGINES:
        if shutil.which(engine):
            return engine
    return None


def compile_pdf(tex: str, engine: str, progress: Optional[Callable[[str], None]] = None) -> bytes:
    """Compile ``tex`` in a temporary directory with ``engine``; the PDF's bytes.

    Two passes (the table of contents); SOURCE_DATE_EPOCH fixes the dates pdfTeX embeds."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path
    env = dict(os.environ, SOURCE_DATE_EPOCH="0", FORCE_SOURCE_DATE="1")
    if engine == "latexmk":
        cmds = [["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "report.tex"]]
    else:
        cmds = [[engine, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"]] * 2
    with tempfile.TemporaryDirectory(prefix="memsym-tex-") as d:
        Path(d, "report.tex").write_text(tex, encoding="utf-8")
        for i, cmd in enumerate(cmds):
            if progress:
                progress(f"compiling report.pdf with {engine}" + (f" (pass {i + 1}/{len(cmds)})" if len(cmds) > 1 else ""))
            try:
                run = subprocess.run(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise PdfError(f"{engine} did not finish within 600 s") from None
            log_path = Path(d, "report.log")
            log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else \
                run.stdout.decode("utf-8", "replace")
            if run.returncode != 0 or not Path(d, "report.pdf").exists():
                first = next((ln for ln in log.splitlines() if ln.startswith("!")), f"exit code {run.returncode}")
                raise PdfError(f"{engine} failed on report.tex: {first.lstrip('! ').strip()}", log)
        return Path(d, "report.pdf").read_bytes()


@dataclass
class Published:
    """What :func:`publish` did: files written (sorted), notes for the user, a PDF error."""

    written: List = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    error: Optional[str] = None


def publish(ctx: Context, out_dir=None, formats: Sequence[str] = DEFAULT_FORMATS,
            progress: Optional[Callable[[str], None]] = None) -> Published:
    """Build the report of ``ctx`` and write the requested formats to ``out_dir``.

    Files: ``report.tex`` / ``.md`` / ``.html`` / ``.pdf`` and one notebook per section,
    ``report-NN-<section>.ipynb`` (``ipynb``) and its HTML (``html``).  Notebooks execute in
    one kernel in a background thread while this process builds the report; everything is
    rendered in memory first and written atomically at the end, so a failure writes nothing
    (a PDF failure still writes the other files and reports the engine's first error).
    """
    import queue
    import threading
    from pathlib import Path
    from . import notebook as nbm
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    formats = tuple(f for f in FORMATS if f in formats)
    result = Published()
    outputs: Dict[str, object] = {}
    say = progress or (lambda msg: None)

    notebooks, worker, finished, kernel = [], None, queue.Queue(), None
    if "ipynb" in formats or "html" in formats:
        say("starting a kernel and laying out the notebooks")
        # the kernel boots and imports while the notebooks are laid out
        kernel = nbm.Kernel().start(warm=nbm.warm_source(ctx))
        skeleton = build_report(ctx, outline=True)
        notebooks = [(nbm.stem(s), s.key, nbm.build_notebook(ctx, skeleton, s)) for s in skeleton.sections
                     if s.notebook]

        def run():
            try:
                kernel.execute([nb for _, _, nb in notebooks], progress=say, done=lambda i, nb: finished.put(i))
            except BaseException as exc:  # re-raised in the main thread
                finished.put(exc)
            finally:
                kernel.shutdown()

        worker = threading.Thread(target=run, name="memsym-notebooks", daemon=True)
        worker.start()

    try:
        _render_all(ctx, out, formats, notebooks, worker, finished, outputs, result, say)
    except BaseException:
        if worker is not None:
            kernel.shutdown()                   # do not leave a kernel behind; the worker then stops
        raise
    say(f"writing {len(outputs)} files to {out}")
    for name in sorted(outputs):
        write_atomic(out / name, outputs[name])
        result.written.append(out / name)
    return result


def _render_all(ctx, out, formats, notebooks, worker, finished, outputs, result, say) -> None:
    """The rendering half of :func:`publish`: report formats, PDF, notebooks as they finish."""
    from . import notebook as nbm
    say(f"building the report ({ctx.model.name}, stage {ctx.stage.index})")
    report = build_report(ctx, progress=lambda m: say("  " + m))
    if "html" in formats:
        report.notebooks = tuple((stem, key) for stem, key, _ in notebooks)
    for fmt in ("tex", "md", "html"):
        if fmt in formats or (fmt == "tex" and "pdf" in formats):
            say(f"rendering report.{fmt}")
            outputs[f"report.{fmt}"] = render(report, fmt)

    if "pdf" in formats:                        # pdflatex runs while the kernel works
        engine = find_tex_engine()
        if engine is None:
            result.notes.append(f"no TeX engine found on PATH ({', '.join(TEX_ENGINES)}): wrote report.tex only; "
                                f"install one (e.g. Debian texlive-latex-recommended) and compile it")
        else:
            try:
                outputs["report.pdf"] = compile_pdf(outputs["report.tex"], engine, say)
                stale_log = out / "report.log"      # from an earlier failed compile
                if stale_log.exists():
                    stale_log.unlink()
            except PdfError as exc:
                result.error = f"{exc} (full log: {out / 'report.log'})"
                if exc.log:
                    outputs["report.log"] = exc.log

    if worker is not None:
        if "html" in formats:
            nbm.html_exporter()                 # load nbconvert while the kernel works
        for _ in notebooks:                     # convert each notebook as soon as it has run
            item = finished.get()
            if isinstance(item, BaseException):
                worker.join()
                raise item
            stem, _, nb = notebooks[item]
            if "ipynb" in formats:
                outputs[f"{stem}.ipynb"] = nbm.to_ipynb(nb)
            if "html" in formats:
                outputs[f"{stem}.html"] = nbm.to_html(nb, stem)
        worker.join()
