"""The generated evaluators (derivations/generated/*.py, printed from the terms) as JavaScript for the page.

``python -m derivations.generate`` prints the search's kernels, the step-time model and the derived symbols as
Python; the page runs the same functions, read with :mod:`ast` and written in JavaScript statement for statement,
each operation in the order the Python computes it.  Exact functions (the kernels' coefficients, the derived
symbols) compute over the page's BigInt rationals (``Q``), the others over floats as numpy does (``x**2`` as
``x*x``, numpy's square).  Only what the printers write is read: any other construct is an error.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Callable, Iterable, Optional

#: numpy's and math's functions of the printed code, in JavaScript (floats).
_FLOAT_CALLS = {"equal": "===", "less": "<"}


class _Printer:
    def __init__(self, exact: bool):
        self.exact = exact

    def expr(self, n) -> str:  # noqa: C901 (one case per node the printers write)
        e = self.expr
        if isinstance(n, ast.Constant):
            if isinstance(n.value, bool) or n.value is None:
                return {True: "true", False: "false", None: "null"}[n.value]
            if isinstance(n.value, str):
                return json.dumps(n.value)
            return f'Q.n("{n.value}")' if self.exact else repr(n.value)
        if isinstance(n, ast.Name):
            return {"nan": "NaN", "True": "true", "False": "false"}.get(n.id, n.id)
        if isinstance(n, ast.Subscript):
            return f"{e(n.value)}[{e(n.slice)}]"
        if isinstance(n, (ast.Tuple, ast.List)):
            return "[" + ", ".join(e(x) for x in n.elts) + "]"
        if isinstance(n, ast.Dict):
            return "{" + ", ".join(f"{e(k)}: {e(v)}" for k, v in zip(n.keys, n.values)) + "}"
        if isinstance(n, ast.IfExp):
            return f"({e(n.test)} ? {e(n.body)} : {e(n.orelse)})"
        if isinstance(n, ast.BoolOp):
            return "(" + (" && " if isinstance(n.op, ast.And) else " || ").join(e(x) for x in n.values) + ")"
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return f"Q.mul(-1, {e(n.operand)})" if self.exact else f"(-{e(n.operand)})"
        if isinstance(n, ast.BinOp):
            return self.binop(n)
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, op, b = n.left, n.ops[0], n.comparators[0]
            if isinstance(op, ast.In):
                return f"({e(a)} in {e(b)})"
            strings = any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (a, b))
            if isinstance(op, ast.Eq):
                return f"({e(a)} === {e(b)})" if strings or not self.exact else f"Q.eq({e(a)}, {e(b)})"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            return self.call(n.func.id, n.args, n.keywords)
        raise ValueError(f"pyjs: {ast.dump(n)[:120]} is not printed (line {getattr(n, 'lineno', '?')})")

    def binop(self, n) -> str:
        a, b = self.expr(n.left), self.expr(n.right)
        if self.exact:
            name = {ast.Add: "add", ast.Sub: None, ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}[type(n.op)]
            if name is None:
                return f"Q.add({a}, Q.mul(-1, {b}))"
            if name == "pow":
                return f"Q.pow({a}, {ast.literal_eval(n.right)})"
            return f"Q.{name}({a}, {b})"
        if isinstance(n.op, ast.Pow):
            k = ast.literal_eval(n.right)
            return f"({a}*{a})" if k == 2 else f"Math.pow({a}, {b})"
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(n.op)]
        return f"({a} {op} {b})"

    def call(self, name, args, keywords) -> str:
        e = self.expr
        if name == "_Q":  # fractions.Fraction
            return f"Q.of({e(args[0])})" if len(args) == 1 else f"Q.div({e(args[0])}, {e(args[1])})"
        if name == "_floor":
            return f"Q.floor({e(args[0])})"
        if name in _FLOAT_CALLS:
            return f"({e(args[0])} {_FLOAT_CALLS[name]} {e(args[1])})"
        if name == "reduce":  # reduce(maximum, [a, b, ...]): numpy's elementwise max or min, as Math's
            return f"Math.{args[0].id[:3]}(" + ", ".join(e(x) for x in args[1].elts) + ")"
        if name == "select":  # numpy.select([c, ..., True], [v, ..., w], default=nan): the first that holds
            out = e(keywords[0].value)
            for c, v in reversed(list(zip(args[0].elts, args[1].elts))):
                out = f"({e(c)} ? {e(v)} : {out})"
            return out
        raise ValueError(f"pyjs: the call {name}() is not printed")

    def stmt(self, n, indent: str) -> str:
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):  # a docstring
            return ""
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            head = f"const {t.id}" if isinstance(t, ast.Name) else self.expr(t)
            return f"{indent}{head} = {self.expr(n.value)};\n"
        if isinstance(n, ast.Return):
            return f"{indent}return {self.expr(n.value)};\n"
        if isinstance(n, ast.If) and not n.orelse:
            body = "".join(self.stmt(s, indent + "  ") for s in n.body)
            return f"{indent}if ({self.expr(n.test)}) {{\n{body}{indent}}}\n"
        raise ValueError(f"pyjs: the statement {ast.dump(n)[:120]} is not printed")


def module_js(path: Path, exact: Callable[[str], bool], names: Optional[Iterable[str]] = None) -> str:
    """``(() => {...; return {names}})()``: the module-level constants and functions ``names`` (default: every public
    one) of the generated module at ``path``, a function exact when ``exact(name)``."""
    out, shown = [], []
    for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
        target = node if isinstance(node, ast.FunctionDef) else getattr(node, "targets", [None])[0]
        name = getattr(target, "name", None) or getattr(target, "id", "_")
        if (names is None and name[0] == "_") or (names is not None and name not in names):
            continue
        shown.append(name)
        if isinstance(node, ast.FunctionDef):
            p = _Printer(exact(name))
            args = ", ".join(a.arg for a in node.args.args)
            out.append(f"function {name}({args}) {{\n" + "".join(p.stmt(s, "  ") for s in node.body) + "}")
        else:
            out.append(f"const {name} = {_Printer(False).expr(node.value)};")
    names = shown
    return "(() => {\n" + "\n".join(out) + f"\nreturn {{{', '.join(names)}}};\n}})()"
