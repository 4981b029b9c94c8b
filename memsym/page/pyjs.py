"""The generated modules (derivations/generated/*.py) read with :mod:`ast` and written as JavaScript statement for
statement, in the Python's order of operations: exact over the page's BigInt rationals ``Q``, else over floats as
numpy computes; any construct the printers do not write is an error."""
from __future__ import annotations

import ast
import json
from typing import Callable, Iterable, Optional

#: numpy's and math's functions of the printed code, in JavaScript (floats).
_FLOAT_CALLS = {"equal": "===", "less": "<"}
#: Exact orderings as the rationals' comparisons: (``Q``'s function, operands swapped).
_ORDER = {ast.Lt: ("lt", False), ast.LtE: ("le", False), ast.Gt: ("lt", True), ast.GtE: ("le", True)}


class _Printer:
    def __init__(self, exact: bool, defined=()):
        self.exact, self.defined = exact, defined

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
        if isinstance(n, ast.Dict):  # computed keys: a tuple's is its elements joined by commas, as JS reads [a, b]
            return "{" + ", ".join(f"[{e(k)}]: {e(v)}" for k, v in zip(n.keys, n.values)) + "}"
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
            if isinstance(op, ast.IsNot) and isinstance(b, ast.Constant) and b.value is None:
                return f"({e(a)} !== null)"
            strings = any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (a, b))
            if isinstance(op, ast.Eq):
                return f"({e(a)} === {e(b)})" if strings or not self.exact else f"Q.eq({e(a)}, {e(b)})"
            if self.exact and type(op) in _ORDER:  # a > b as Q.lt(b, a)
                name, swap = _ORDER[type(op)]
                return f"Q.{name}({e(b)}, {e(a)})" if swap else f"Q.{name}({e(a)}, {e(b)})"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            return self.call(n.func.id, n.args, n.keywords)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get":  # dict.get(k)
            return f"({e(n.func.value)}[{e(n.args[0])}] ?? null)"
        if isinstance(n, ast.Call):  # a function the module defines, looked up
            return f"{e(n.func)}(" + ", ".join(e(x) for x in n.args) + ")"
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
        if name in ("min", "max"):  # over the page's rationals (null: +infinity) or floats
            return f"{'Q' if self.exact else 'Math'}.{name}(" + ", ".join(e(x) for x in args) + ")"
        if name in self.defined:  # a function the module defines
            return f"{name}(" + ", ".join(e(x) for x in args) + ")"
        raise ValueError(f"pyjs: the call {name}() is not printed")

    def stmt(self, n, indent: str) -> str:
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):  # a docstring
            return ""
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            head = f"const {t.id}" if isinstance(t, ast.Name) else f"const {self.expr(t)}" if isinstance(
                t, ast.Tuple) else self.expr(t)
            return f"{indent}{head} = {self.expr(n.value)};\n"
        if isinstance(n, ast.Return):
            return f"{indent}return {self.expr(n.value)};\n"
        if isinstance(n, ast.Raise):
            return f"{indent}throw new Error(String({self.expr(n.exc.args[0])}));\n"
        if isinstance(n, ast.If) and not n.orelse:
            body = "".join(self.stmt(s, indent + "  ") for s in n.body)
            return f"{indent}if ({self.expr(n.test)}) {{\n{body}{indent}}}\n"
        raise ValueError(f"pyjs: the statement {ast.dump(n)[:120]} is not printed")


def expression_js(source: str) -> str:
    """The JavaScript of a Python expression's ``source`` (symbol values read from the dict ``e``), exact."""
    return _Printer(True).expr(ast.parse(source, mode="eval").body)


def module_js(source: str, exact: Callable[[str], bool], names: Optional[Iterable[str]] = None) -> str:
    """``(() => {...; return {names}})()``: the module-level constants and functions ``names`` (default: every public
    one) of a generated module's ``source``, with the helpers a name's function dispatches to (``_device_*`` of
    ``device``), a function exact when ``exact(name)``."""
    out, shown = [], []
    keep, body = None if names is None else tuple(names), ast.parse(source).body
    defined = {node.name for node in body if isinstance(node, ast.FunctionDef)}
    for node in body:
        target = node if isinstance(node, ast.FunctionDef) else getattr(node, "targets", [None])[0]
        name = getattr(target, "name", None) or getattr(target, "id", "_")
        if keep is None and name[0] == "_" or keep is not None and name not in keep and not any(
                name.startswith(f"_{k}_") for k in keep):
            continue
        shown.append(name)
        if isinstance(node, ast.FunctionDef):
            p = _Printer(exact(name), defined)
            args = ", ".join(a.arg for a in node.args.args)
            out.append(f"function {name}({args}) {{\n" + "".join(p.stmt(s, "  ") for s in node.body) + "}")
        else:
            out.append(f"const {name} = {_Printer(False).expr(node.value)};")
    return "(() => {\n" + "\n".join(out) + f"\nreturn {{{', '.join(shown)}}};\n}})()"
