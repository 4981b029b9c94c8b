"""Making the plan of a report (:mod:`.plan`) in the process that computed the report afresh with sympy.

While the report is computed, every number read off a term (``Context.exact``, ``Context.value_of``, the
equations' trees) carries its expression in ``s`` (:class:`.plan.Traced`, from :func:`s_tree`: the term's own
sympy expression, every other symbol at this configuration's value).  The report is then rendered again with a
marker (:data:`.plan.MARKER`, digits) in place of each such number, of each number of the tables computed again
at a new configuration (:data:`.plan.FRESH_TABLES`) and of each run of digits of their texts and of the setting
lines: the literal text between markers and the slots are the plan.  It is stored only when

1. filled in at this configuration, it gives this process's files byte for byte, and
2. filled in at a second sequence length, it gives the ``report.<fmt>`` files the full computation gives there
   (a number that ``s`` changes but that was not traced, or a block that ``s`` shows or hides, differs).
"""
from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from typing import Dict, List, Optional

import sympy as sp

from derivations import notation as nt
from symbolic import cache
from symbolic.notation import expand_derived

from . import plan as P
from . import rendering
from .blocks import Cell
from .equations import tree


def s_tree(expr, subs: Dict):
    """The tree (:func:`memsym.report.equations.tree`) of ``expr`` with every symbol but ``s`` at its value
    in ``subs``: an expression in ``s`` alone; 0 when it has no ``s``; None when it is not such a tree."""
    e = expand_derived(sp.sympify(getattr(expr, "expr", expr)))
    rest = {}
    for k in e.free_symbols:
        if k == nt.s:
            continue
        v = subs.get(k)
        if isinstance(v, sp.Rational):
            rest[k] = v
        elif type(v) in (int, Fraction):
            rest[k] = sp.Rational(v.numerator, v.denominator)
        else:
            return None
    e = e.xreplace(rest)
    if not e.free_symbols:
        return 0
    return tree(e) if e.free_symbols == {nt.s} else None


def tracer(s0: int):
    """The ``_tracer`` of a context whose report's plan is made (``Context.traced``): a value with its tree in
    ``s`` when it has one that gives the value at ``s0``; the value as it is otherwise."""
    def trace(value, expr, subs):
        if isinstance(value, P.Traced):
            return value
        try:
            t = s_tree(expr, subs)
            if t is None or t == 0 or P.value(t, s0) != value:
                return value
        except (TypeError, ValueError, ZeroDivisionError, AttributeError):
            return value
        return P.Traced(value, t)
    return trace


class _Fresh:
    """A number of a fresh table (:data:`.plan.FRESH_TABLES`) at row, column: marked ``["f", ...]``."""

    def __init__(self, where):
        self.where = where


class _Slots:
    """The slots of a plan being made, one per distinct spec, and their markers."""

    def __init__(self):
        self.specs: List = []
        self.index: Dict[str, int] = {}

    def marker(self, spec) -> str:
        key = json.dumps(spec)
        if key not in self.index:
            self.index[key] = len(self.specs)
            self.specs.append(spec)
        return P.marker(self.index[key])

    def mark(self, x, fmt: str) -> Optional[str]:
        """:data:`memsym.report.rendering.MARKING`."""
        if isinstance(x, P.Traced):
            return self.marker(["t", x.tree, fmt])
        if isinstance(x, _Fresh):
            return self.marker(["f", *x.where, fmt])
        return None

    def text(self, text: str, field) -> str:
        """``text`` with each run of digits marked ``["k", field, i]``."""
        count = iter(range(1 << 30))
        return P.DIGITS.sub(lambda m: self.marker(["k", field, next(count)]), text)


def _marked_table(table, slots: _Slots):
    key = table.key
    rows = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, cell in enumerate(row):
            if cell.kind in ("int", "gib"):
                cells.append(Cell(cell.kind, _Fresh([key, r, c])))
            elif cell.kind == "text":
                cells.append(Cell("text", slots.text(cell.value, [key, "cell", r, c])))
            else:
                cells.append(cell)
        rows.append(tuple(cells))
    return dataclasses.replace(table, caption=slots.text(table.caption, [key, "caption"]),
                               note=slots.text(table.note, [key, "note"]), rows=tuple(rows))


def _marked(report, slots: _Slots):
    """``report`` with the fresh tables and the setting lines marked (the traced numbers are marked as rendered)."""
    setting = tuple((k, slots.text(v, ["setting", i])) for i, (k, v) in enumerate(report.setting))
    sections = [dataclasses.replace(s, blocks=[_marked_table(b, slots) if getattr(b, "key", None) in P.FRESH_TABLES
                                               and b.kind == "table" else b for b in s.blocks])
                for s in report.sections]
    return dataclasses.replace(report, setting=setting, sections=sections)


class _Shown:
    """A context as the notebooks read it, with the training's ``seq`` a marker (the configuration cell)."""

    def __init__(self, ctx, training):
        self._ctx, self.training = ctx, training

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _notebooks(ctx, outline, marked, slots: _Slots) -> Dict[str, str]:
    from . import notebook as nbm
    seq = int(slots.marker(["t", "s", "repr"]))
    shown = _Shown(ctx, dataclasses.replace(ctx.training, seq=seq))
    outline = dataclasses.replace(outline, setting=marked.setting)
    out = {}
    for o, d in zip(outline.sections, marked.sections):
        if o.notebook:
            nb = nbm.build_notebook(shown, outline, o, computed=d.blocks, sent=True)
            out[f"{nbm.stem(o)}.html"] = nbm.html_of_json(nbm.to_json(nb), nbm.stem(o))
    return out


def _split(text: str, n: int, lines: Dict[str, int]) -> Optional[list]:
    """``text`` as [literal, slot, literal, ...], each literal the indices of its lines in ``lines`` (the
    notebooks' pages share most of their lines: the plan holds each line once)."""
    pieces, pos = [], 0

    def literal(t):
        return [lines.setdefault(line, len(lines)) for line in t.split("\n")]
    for m in P.MARKER.finditer(text):
        k = int(m.group(1))
        if k >= n:
            return None
        pieces += [literal(text[pos:m.start()]), k]
        pos = m.end()
    return pieces + [literal(text[pos:])]


def document(ctx, outline, report, formats, fresh) -> Optional[dict]:
    """The plan of ``report`` (computed with a tracing context, laid out as ``outline``; ``fresh`` its
    :func:`.plan.fresh_parts`), or None."""
    slots = _Slots()
    marked = _marked(report, slots)
    rendering.MARKING = slots.mark
    try:
        texts = {f"report.{fmt}": rendering.render(marked, fmt) for fmt in formats}
        if "html" in formats:
            texts.update(_notebooks(ctx, outline, marked, slots))
    finally:
        rendering.MARKING = None
    files, lines = {}, {}
    for name, text in texts.items():
        pieces = _split(text, len(slots.specs), lines)
        if pieces is None:
            return None
        files[name] = pieces
    return {"version": P.VERSION, "s": ctx.training.seq, "slots": slots.specs, "lines": list(lines), "files": files,
            "fresh": json.loads(json.dumps(P.skeletons(fresh)))}


def _second(ctx, outline, report, formats, doc) -> bool:
    """Whether ``doc`` at a second sequence length gives the report files the full computation gives there."""
    from . import cached, sections
    from .context import Context
    lay = ctx.layout
    s1 = ctx.training.seq + lay.SP * lay.cp
    try:
        ctx1 = Context.create(ctx.model, lay, dataclasses.replace(ctx.training, seq=s1), ctx.stage.index)
    except Exception:
        return False
    outline1 = sections.outline_report(ctx1)
    if dataclasses.replace(outline1, setting=()) != dataclasses.replace(outline, setting=()):
        return False
    report1 = sections.complete_report(ctx1, outline1, tables=cached._shared_tables(ctx1))
    report1.notebooks = report.notebooks
    got = P.fill(doc, s1, P.fresh_parts(P.Setting(ctx1.model, lay, ctx1.training, ctx1.stage)))
    return got is not None and all(got[f"report.{fmt}"] == rendering.render(report1, fmt) for fmt in formats)


def make(ctx, outline, report, outputs: Dict[str, object], formats, say) -> bool:
    """Make and store the plan of ``report`` (computed afresh with ``ctx``'s tracer) when it gives ``outputs``
    (this process's files) and the full computation at a second sequence length; whether it was stored."""
    formats = tuple(f for f in P.PLAN_FORMATS if f in formats)
    k = P.plan_key(ctx.model, ctx.layout, ctx.training, ctx.stage, formats, "html" in formats)
    if k is None:
        return False
    parts = P.fresh_parts(P.Setting(ctx.model, ctx.layout, ctx.training, ctx.stage))
    doc = document(ctx, outline, report, formats, parts)
    if doc is None:
        return False
    here = P.fill(doc, ctx.training.seq, parts)
    if here is None or set(here) != set(outputs) or any(here[n] != outputs[n] for n in here):
        say("no plan: it does not give this report")
        return False
    if not _second(ctx, outline, report, formats, doc):
        say("no plan: the sequence length changes more than its numbers")
        return False
    return cache.store("report", k, json.dumps(doc, separators=(",", ":")).encode("utf-8"))
