"""A report of a new sequence length from its plan, without sympy (issue 25: a new configuration's report at a
few times the cost of a new ``memsym estimate``).

A *plan* is data, never code: the report's files (``report.tex``/``.md``/``.html`` and the notebooks' HTML)
as literal text between *slots*, each slot a number that the sequence length ``s`` changes (the literal text
as indices into the plan's ``lines``, each distinct line once).  A slot is

* ``["t", tree, fmt]``: an exact expression tree in ``s`` alone (integers, ``["q", p, q]``, ``["+", ...]``,
  ``["*", ...]``, ``["^", base, k]``, the name ``"s"``: the term's own sympy expression with every other
  symbol at its value, :func:`memsym.report.planmake.s_tree`), evaluated in ``Fraction`` arithmetic and
  formatted as the report formats it (``fmt``: ``int`` :func:`symbolic.exact.fmt_int`, ``gib``
  :func:`symbolic.exact.fmt_gib`, ``repr`` the integer's ``repr``: the notebooks' configuration cell);
* ``["f", table, row, column, fmt]``: a number of a table the configuration alone decides
  (:data:`FRESH_TABLES`: the estimate, Sec. 6 and the implementations waterfall, :mod:`.fresh`), which is
  computed again here at the new configuration by the same generated evaluators (not planned);
* ``["k", field, i]``: the ``i``-th run of digits of a text of those tables or of the setting lines
  (:func:`.fresh.setting`), computed again here too.

A plan is made only by a ``memsym report`` process that computed the report afresh with sympy, and stored only
when the plan filled in at that process's own configuration gives its files byte for byte, and at a second
sequence length the files the full computation gives (:mod:`.planmake`).  It is keyed by everything the report
depends on but ``s`` (:func:`plan_key`).  It is used only when everything the tables of :mod:`.fresh` show but
their numbers is what the plan recorded (:func:`_skeleton`: no row, switch or text that ``s`` shows or hides);
otherwise, or on any miss, ``memsym report`` computes the report as usual.
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from fractions import Fraction
from typing import Dict, List, Optional, Sequence

#: The plan's format (a part of its key).
VERSION = 2
#: The formats a plan holds (the notebooks' HTML with ``html``).
PLAN_FORMATS = ("tex", "md", "html")
#: Tables of :mod:`.fresh`: computed again at the new configuration (their numbers are slots ``f`` and ``k``).
FRESH_TABLES = ("estimate", "overheads", "implementations")
#: What stands for slot ``k`` in a plan's text while it is made: digits only, so every escaper, Markdown
#: and pygments treat it as they treat the number it stands for.
MARKER = re.compile(r"7392(\d{6})2937")
#: A run of digits (thousands separators included) in a text: the part of a text a slot ``k`` may change.
DIGITS = re.compile(r"\d+(?:,\d{3})*")
#: What a slot's text may be: what every format shows unescaped (:func:`_check`).
SAFE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?\Z")
#: A text column of a table wider than this wraps in LaTeX (:func:`memsym.report.rendering.tex_spec`).
WIDE = 45


def marker(k: int) -> str:
    return f"7392{k:06d}2937"


class Traced(Fraction):
    """A number of the report and its exact expression in ``s`` (``tree``), while a plan is made: the value
    is the Fraction itself; arithmetic with numbers keeps the expression; it pickles as a plain Fraction."""

    __slots__ = ("tree",)

    def __new__(cls, value, tree):
        self = super().__new__(cls, value)
        self.tree = tree
        return self

    def __repr__(self):
        return f"Fraction({self.numerator}, {self.denominator})"

    def __reduce__(self):
        return Fraction, (self.numerator, self.denominator)

    def _with(self, other, op: str, value, swap: bool = False):
        if not isinstance(other, (int, Fraction)):
            return NotImplemented
        b = other.tree if isinstance(other, Traced) else _const(Fraction(other))
        if op == "/":
            b = ["^", b, -1]
        parts = [b, self.tree] if swap else [self.tree, b]
        return Traced(value, ["+" if op == "+" else "*", *parts])

    def __add__(self, o):
        return self._with(o, "+", Fraction(self) + o) if isinstance(o, (int, Fraction)) else NotImplemented

    def __radd__(self, o):
        return self._with(o, "+", o + Fraction(self), True) if isinstance(o, (int, Fraction)) else NotImplemented

    def __mul__(self, o):
        return self._with(o, "*", Fraction(self) * o) if isinstance(o, (int, Fraction)) else NotImplemented

    def __rmul__(self, o):
        return self._with(o, "*", o * Fraction(self), True) if isinstance(o, (int, Fraction)) else NotImplemented

    def __truediv__(self, o):
        return self._with(o, "/", Fraction(self) / o) if isinstance(o, (int, Fraction)) else NotImplemented


def _const(f: Fraction):
    return f.numerator if f.denominator == 1 else ["q", f.numerator, f.denominator]


def value(tree, s: int) -> Fraction:
    """The exact value of ``tree`` at sequence length ``s`` (ValueError for anything but a tree of ``s``)."""
    kind = type(tree)
    if kind is int:
        return Fraction(tree)
    if kind is str:
        if tree != "s":
            raise ValueError(tree)
        return Fraction(s)
    if kind is not list or not tree:
        raise ValueError(tree)
    op, args = tree[0], tree[1:]
    if op == "+":
        return sum((value(a, s) for a in args), Fraction(0))
    if op == "*":
        out = Fraction(1)
        for a in args:
            out *= value(a, s)
        return out
    if op == "^" and len(args) == 2 and type(args[1]) is int:
        return value(args[0], s) ** args[1]
    if op == "q" and len(args) == 2 and type(args[0]) is int and type(args[1]) is int:
        return Fraction(args[0], args[1])
    raise ValueError(op)


def _format(v, fmt: str) -> str:
    from symbolic.exact import fmt_gib, fmt_int
    if fmt == "int":
        return fmt_int(v)
    if fmt == "gib":
        return fmt_gib(v)
    if fmt == "repr" and Fraction(v).denominator == 1:
        return repr(int(v))
    raise ValueError(fmt)


# ----------------------------------------------------------------------------- the tables computed again
class Setting:
    """The configuration as plain data: what :mod:`.fresh` reads of a context (its estimate kept here)."""

    def __init__(self, model, layout, training, stage):
        self.model, self.layout, self.training, self.stage = model, layout, training, stage


def fresh_parts(ctx) -> Dict[str, object]:
    """{table key: the table, ``"setting"``: the setting lines} of ``ctx`` (:mod:`.fresh`, no sympy)."""
    from . import fresh
    makers = {"estimate": fresh.table_estimate, "overheads": fresh.table_overheads,
              "implementations": fresh.table_implementation_waterfall}
    out = {k: makers[k](ctx) for k in FRESH_TABLES}
    out["setting"] = fresh.setting(ctx)
    return out


def _skel(text: str) -> str:
    return DIGITS.sub("#", text)


def _skeleton(key: str, part) -> list:
    """What of a fresh table (or the setting lines) must not change with ``s``: everything but its numbers and
    runs of digits in its texts, and which of its text columns are wide in LaTeX."""
    if key == "setting":
        return [[k, _skel(v)] for k, v in part]
    rows = [[[c.kind, None if c.kind in ("int", "gib") else _skel(c.value) if c.kind == "text" else c.value]
             for c in row] for row in part.rows]
    wide = [max([len(r[i].value) for r in part.rows if i < len(r) and r[i].kind == "text"] + [0]) > WIDE
            for i in range(len(part.align))]
    return [part.key, _skel(part.caption), part.source, list(part.columns), list(part.align), rows,
            _skel(part.note), wide]


def skeletons(parts: Dict[str, object]) -> dict:
    return {k: _skeleton(k, v) for k, v in parts.items()}


def _field_text(parts, field) -> str:
    key = field[0]
    if key == "setting":
        return parts["setting"][field[1]][1]
    table = parts[key]
    if field[1] == "caption":
        return table.caption
    if field[1] == "note":
        return table.note
    cell = table.rows[field[2]][field[3]]
    if cell.kind != "text":
        raise ValueError(field)
    return cell.value


def _slot_text(spec, s: int, parts) -> str:
    kind = spec[0]
    if kind == "t":
        return _format(value(spec[1], s), spec[2])
    if kind == "f":
        cell = parts[spec[1]].rows[spec[2]][spec[3]]
        if cell.kind != spec[4]:
            raise ValueError(spec)
        return _format(cell.value, spec[4])
    if kind == "k":
        return DIGITS.findall(_field_text(parts, spec[1]))[spec[2]]
    raise ValueError(kind)


def fill(doc: dict, s: int, parts: Dict[str, object]) -> Optional[Dict[str, str]]:
    """{file name: text} of plan ``doc`` at sequence length ``s``, the fresh tables and setting ``parts``
    computed at the new configuration; None when the plan does not apply (a fresh table or the setting shows
    something else than the plan recorded, a slot's text is not a plain number) or is malformed."""
    try:
        if json.loads(json.dumps(skeletons(parts))) != doc["fresh"]:
            return None
        texts = [_slot_text(spec, s, parts) for spec in doc["slots"]]
        if not all(SAFE.match(t) for t in texts):
            return None
        lines, out = doc["lines"], {}
        for name, pieces in doc["files"].items():
            out[name] = "".join("\n".join([lines[i] for i in p]) if type(p) is list else texts[p] for p in pieces)
        return out
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
        return None


# ----------------------------------------------------------------------------- the key
def plan_key(model, layout, training, stage, formats: Sequence[str], notebooks: bool) -> Optional[str]:
    """The cache key of the plan of this configuration (all but ``training.seq``), or None: no cache, a family
    that is not memsym's own (its code is not in :func:`memsym.report.digest.code_digest`), code changed."""
    from symbolic import cache
    from derivations import families
    from .digest import HTML_PACKAGES, code_digest, installed_versions
    if not cache.enabled() or not families.packaged(getattr(model, "family", None)):
        return None
    digest = code_digest()
    if digest is None:
        return None
    parts = ("report-plan", VERSION, repr(model), repr(layout), repr(dataclasses.replace(training, seq=0)),
             repr(stage), repr(tuple(formats)), notebooks, digest, sys.version_info[:2],
             installed_versions(("sympy",) + HTML_PACKAGES))
    return cache.key(*parts)


def load(k: str) -> Optional[dict]:
    """The plan stored under ``k`` (authenticated by :func:`symbolic.cache.load`, then read as JSON), or None."""
    from symbolic import cache
    data = cache.load("report", k)
    if data is None:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    ok = (isinstance(doc, dict) and doc.get("version") == VERSION and isinstance(doc.get("slots"), list)
          and isinstance(doc.get("lines"), list) and all(type(x) is str for x in doc["lines"])
          and isinstance(doc.get("files"), dict) and all(isinstance(v, list) for v in doc["files"].values()))
    return doc if ok else None


def serve(model, layout, training, stage, formats: Sequence[str], out_dir, say) -> Optional[List]:
    """``memsym report`` of this configuration (``model`` a preset name, a config path or a ModelSpec; ``stage``
    an index or None, as ``Context.create`` takes them) from its plan: the files written, or None (no plan, or it
    does not apply: the caller computes the report, and says what is wrong with the configuration).  Loads no
    sympy."""
    if not formats or any(f not in PLAN_FORMATS for f in formats):
        return None  # a PDF or notebooks: computed
    formats = tuple(f for f in PLAN_FORMATS if f in formats)
    from derivations import config as cfg
    from derivations.config import ConfigError
    from derivations.assembly.device import default_stage
    try:
        model = cfg.load_model(model) if isinstance(model, str) else (model or cfg.load_model("deepseek-v3"))
        cfg.validate_layout(model, layout, training.seq)
        cfg.validate_training(training)
        comp = cfg.stage(model, layout, default_stage(layout) if stage is None else stage)
    except (ConfigError, OSError, ValueError):
        return None  # the report says why
    k = plan_key(model, layout, training, comp, formats, "html" in formats)
    doc = load(k) if k is not None else None
    if doc is None:
        return None
    say(f"building the report ({model.name}, stage {comp.index}) from its plan")
    files = fill(doc, training.seq, fresh_parts(Setting(model, layout, training, comp)))
    if files is None:
        say("the plan does not apply to this configuration: computing the report")
        return None
    from symbolic.files import write_tree
    say(f"writing {len(files)} files to {out_dir}")
    return write_tree(out_dir, files)
