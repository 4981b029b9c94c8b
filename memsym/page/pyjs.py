"""Python read with :mod:`ast` and written as JavaScript statement for statement: the generated modules
(derivations/generated/*.py) exact over the page's BigInt rationals ``Q`` or over floats as numpy computes, and the
command line's readers and checks (:class:`Printed`) over Python's values; a construct not printed is an error."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import textwrap
from fractions import Fraction
from typing import Callable, Dict, Iterable, Optional

#: numpy's and math's functions of the printed code, in JavaScript (floats).
_FLOAT_CALLS = {"equal": "===", "less": "<"}
#: Exact orderings as the rationals' comparisons: (``Q``'s function, operands swapped).
_ORDER = {ast.Lt: ("lt", False), ast.LtE: ("le", False), ast.Gt: ("lt", True), ast.GtE: ("le", True)}
_FLOAT_ORDER = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


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
        if isinstance(n, ast.Dict):  # computed keys (a tuple's is its elements joined by commas, as JS reads [a, b])
            return "{" + ", ".join(f"{e(k) if isinstance(k, ast.Constant) else f'[{e(k)}]'}: {e(v)}"
                                   for k, v in zip(n.keys, n.values)) + "}"
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
            if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(b, ast.Constant) and b.value is None:
                return f"({e(a)} {'===' if isinstance(op, ast.Is) else '!=='} null)"
            strings = any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (a, b))
            if isinstance(op, ast.Eq):
                return f"({e(a)} === {e(b)})" if strings or not self.exact else f"Q.eq({e(a)}, {e(b)})"
            if self.exact and type(op) in _ORDER:  # a > b as Q.lt(b, a)
                name, swap = _ORDER[type(op)]
                return f"Q.{name}({e(b)}, {e(a)})" if swap else f"Q.{name}({e(a)}, {e(b)})"
            if type(op) in _ORDER:  # floats
                return f"({e(a)} {_FLOAT_ORDER[type(op)]} {e(b)})"
        if isinstance(n, ast.JoinedStr):  # an error's message
            return "(" + " + ".join(json.dumps(v.value) if isinstance(v, ast.Constant) else f"String({e(v.value)})"
                                    for v in n.values) + ")"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            return self.call(n.func.id, n.args, n.keywords)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get":  # dict.get(k, d)
            return f"({e(n.func.value)}[{e(n.args[0])}] ?? {e(n.args[1]) if len(n.args) > 1 else 'null'})"
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
        if name in ("min", "max", "minimum", "maximum"):  # over the page's rationals (null: +infinity) or floats
            return f"{'Q' if self.exact else 'Math'}.{name[:3]}(" + ", ".join(e(x) for x in args) + ")"
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


# ----------------------------------------------------------------------------- Python functions, as the page runs them
#: Python's builtins in the printed functions: the page's ``py`` object (templates/page/runtime.js) runs each.
_BUILTINS = {"len", "isinstance", "any", "all", "sum", "min", "max", "range", "zip", "enumerate", "list", "tuple",
             "str", "repr", "int", "bool", "next", "frozenset", "set", "dict", "getattr", "type", "divmod"}
_TYPES = {"int", "float", "str", "bool", "list", "tuple", "dict", "set", "frozenset"}
#: Python names JavaScript reserves, renamed.
_RESERVED = {"default", "function", "var", "new", "delete", "in", "class", "this", "let", "const", "switch", "case",
             "void", "with", "do", "enum", "export", "import", "super", "typeof", "instanceof"}
#: Python's methods of str, list and dict the printed functions call: the page's ``py.m``.
_METHODS = {"get", "items", "keys", "values", "split", "join", "update", "format", "upper", "append", "strip",
            "partition", "lstrip", "startswith", "replace"}
_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.Mod: "mod", ast.FloorDiv: "floordiv",
        ast.BitOr: "union"}
_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.In: "in",
        ast.NotIn: "notin"}


def _bound(t) -> list:
    """The names an assignment to ``t`` binds (not an attribute's or an item's)."""
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Starred):
        return _bound(t.value)
    return [x for e in getattr(t, "elts", ()) for x in _bound(e)]


def _ident(name: str) -> str:
    return name + "_" if name in _RESERVED else name


class Printed:
    """Python functions and classes (their source read with :mod:`ast`) written as JavaScript over the page's ``py``
    (Python's values: ints as BigInt or Number, dicts as Map, str as its code points): one definition the command line
    runs and the page prints.  ``natives``: {Python object: JavaScript expression} for what the page has its own of
    (Python's repr, the parsed JSON's type names); a module constant is written as JSON data; anything else is an
    error at generation."""

    def __init__(self, natives: Dict):
        self.natives = {id(getattr(k, "__func__", k)): v for k, v in natives.items()}  # a class method: its function
        self.names: Dict[int, str] = {}   # id(function or class) -> its JavaScript name
        self.signatures: Dict[str, list] = {}  # callable or method name -> its inspect.Parameters (keyword calls)
        self.fields: Dict[str, list] = {}  # dataclass name -> its fields in order
        self.classes: set = set()
        self.constants: Dict[str, str] = {}
        self.out: list = []
        self.pending: list = []

    def add(self, obj, members: Optional[Iterable[str]] = None, name: Optional[str] = None) -> str:
        """Print ``obj`` (a function or class; of a class only ``members``) once; its JavaScript name."""
        if id(obj) not in self.names:
            self.names[id(obj)] = js_name = name or obj.__name__
            self.pending.append((obj, members))
            if inspect.isclass(obj):
                self.classes.add(js_name)
                for m in members or ():
                    fn = inspect.getattr_static(obj, m)
                    if callable(fn) and not isinstance(fn, staticmethod):
                        self.signatures[m] = list(inspect.signature(fn).parameters.values())[1:]
                if dataclasses.is_dataclass(obj):
                    self.fields[js_name] = [f.name for f in dataclasses.fields(obj)]
            else:
                self.signatures[js_name] = list(inspect.signature(obj).parameters.values())
        return self.names[id(obj)]

    def js(self) -> str:
        """The classes, then the constants (instances of them), then the functions."""
        classes = []
        while self.pending:
            obj, members = self.pending.pop(0)
            if inspect.isclass(obj):
                classes.append(_Function(self, obj).klass(members))
            else:
                self.out.append(_Function(self, obj).fn())
        return "\n".join([*classes, *self.constants.values(), *self.out])

    def known(self, value) -> bool:
        return any(id(x) in self.names or id(x) in self.natives for x in (value, getattr(value, "__func__", None)))

    def resolve(self, value, where: str) -> str:
        """A module-level value a printed function reads, as JavaScript."""
        if id(value) in self.names:
            return self.names[id(value)]
        if id(value) in self.natives:
            return self.natives[id(value)]
        if id(getattr(value, "__func__", None)) in self.natives:  # a class method, by its function
            return self.natives[id(value.__func__)]
        if callable(value):
            raise ValueError(f"pyjs: {where} is neither printed nor native")
        name, text = "K_" + where.replace(".", "_"), self.literal(value)
        if self.constants.setdefault(name, f"const {name} = {text};") != f"const {name} = {text};":
            raise ValueError(f"pyjs: two values named {where}")
        return name


    def literal(self, x) -> str:
        """A constant as JavaScript: a dataclass instance its fields and properties (built by its class when that is
        printed), a dict an object, a tuple an array, a float Python's, a Fraction the page's Q, a pattern its match."""
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            keys = [f.name for f in dataclasses.fields(x)] + [k for k, v in vars(type(x)).items()
                                                              if isinstance(v, property)]
            data = "{" + ",".join(f"{json.dumps(k)}:{self.literal(getattr(x, k))}" for k in keys) + "}"
            return f"new {self.names[id(type(x))]}({data})" if id(type(x)) in self.names else data
        if isinstance(x, dict):
            return "{" + ",".join(f"{json.dumps(str(k))}:{self.literal(v)}" for k, v in x.items()) + "}"
        if isinstance(x, (tuple, list, set, frozenset)):
            return "[" + ",".join(self.literal(v) for v in x) + "]"
        if isinstance(x, re.Pattern):
            return f"py.compile({json.dumps(x.pattern)})"
        if isinstance(x, Fraction):
            return f"Q.n({x.numerator}, {x.denominator})"
        return f"new PyFloat({x!r})" if isinstance(x, float) else json.dumps(x)


class _Function:
    """One function (or class) of :class:`Printed`."""

    def __init__(self, printed: Printed, obj):
        self.p, self.obj = printed, obj
        self.globals = vars(inspect.getmodule(obj))
        self.module = obj.__module__.rsplit(".", 1)[-1]
        self.locals: set = set()
        self.caught = None

    def fn(self, method: bool = False, fn=None) -> str:
        fn = fn or self.obj
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        a = node.args
        params = [x.arg for x in a.args][1 if method else 0:] + ([a.kwarg.arg] if a.kwarg else [])
        self.locals = set(params) | {"self"}
        defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults) + [None] * bool(a.kwarg)
        heads = [_ident(p) + ("" if d is None else f" = {self.expr(d)}")
                 for p, d in zip(params, defaults[1 if method else 0:])]
        assigned = sorted({_ident(name) for s in ast.walk(node)
                           if isinstance(s, (ast.Assign, ast.AnnAssign, ast.For, ast.AugAssign))
                           for name in _bound(s.targets[0] if isinstance(s, ast.Assign) else s.target)}
                          - set(map(_ident, params)))
        self.locals |= set(assigned)
        body = (f"  let {', '.join(assigned)};\n" if assigned else "") + self.block(node.body, "  ")
        head = node.name if method else f"function {self.p.names.get(id(fn), node.name)}"
        return f"{head}({', '.join(heads)}) {{\n{body}}}"

    def klass(self, members) -> str:
        cls, name, out = self.obj, self.p.names[id(self.obj)], []
        fields = self.p.fields.get(name)
        if fields is not None:  # a dataclass: built from {field: value} (its defaults where not given)
            defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
            out.append(f"  constructor(kw) {{ Object.assign(this, {self.p.literal(defaults)}, kw); }}")
        for m in members:
            v = inspect.getattr_static(cls, m)
            if m == "__init__":
                out.append("  constructor" + self.fn(True, v)[len(m):].replace("\n", "\n  "))
            elif isinstance(v, property):
                out.append("  get " + self.fn(True, v.fget).replace("\n", "\n  "))
            elif isinstance(v, staticmethod):
                out.append(f"  {m}(...a) {{ return {self.p.resolve(v.__func__, f'{name}.{m}')}(...a); }}")
            elif callable(v):
                out.append("  " + self.fn(True, v).replace("\n", "\n  "))
            else:
                out.append(f"  get {m}() {{ return {self.p.literal(v)}; }}")
        return f"class {name} {{\n" + "\n".join(out) + "\n}"

    # -- statements
    def block(self, body, indent) -> str:
        return "".join(self.stmt(s, indent) for s in body)

    def stmt(self, n, indent) -> str:  # noqa: C901 (one case per statement printed)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):  # a docstring
            return ""
        if isinstance(n, ast.Expr):
            return f"{indent}{self.expr(n.value)};\n"
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if isinstance(t, ast.Tuple) and not all(isinstance(x, ast.Name) for x in t.elts):  # a, x[k] = ...
                self.locals.add("_v")
                each = [ast.Assign([x], ast.Subscript(ast.Name("_v"), ast.Constant(i))) for i, x in enumerate(t.elts)]
                head = f"{indent}{{\n{indent}  const _v = {self.expr(n.value)};\n"
                return f"{head}{self.block(each, indent + '  ')}{indent}}}\n"
            if isinstance(t, ast.Subscript):
                return f"{indent}py.setitem({self.expr(t.value)}, {self.expr(t.slice)}, {self.expr(n.value)});\n"
            return f"{indent}{self.expr(t)} = {self.expr(n.value)};\n"
        if isinstance(n, ast.AnnAssign) and n.value is not None:
            return f"{indent}{self.expr(n.target)} = {self.expr(n.value)};\n"
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Subscript):  # x[k] += v
            x, k = self.expr(n.target.value), self.expr(n.target.slice)
            value = f"py.{_OPS[type(n.op)]}(py.getitem({x}, {k}), {self.expr(n.value)})"
            return f"{indent}py.setitem({x}, {k}, {value});\n"
        if isinstance(n, ast.AugAssign):
            t = self.expr(n.target)
            return f"{indent}{t} = py.{_OPS[type(n.op)]}({t}, {self.expr(n.value)});\n"
        if isinstance(n, ast.Return):
            return f"{indent}return {'null' if n.value is None else self.expr(n.value)};\n"
        if isinstance(n, ast.Raise):
            return f"{indent}throw {self.caught if n.exc is None else self.expr(n.exc)};\n"
        if isinstance(n, ast.Pass):
            return ""
        if isinstance(n, (ast.Continue, ast.Break)):
            return f"{indent}{'continue' if isinstance(n, ast.Continue) else 'break'};\n"
        if isinstance(n, ast.If):
            out = f"{indent}if ({self.test(n.test)}) {{\n{self.block(n.body, indent + '  ')}{indent}}}"
            if n.orelse:
                out += f" else {{\n{self.block(n.orelse, indent + '  ')}{indent}}}"
            return out + "\n"
        if isinstance(n, ast.Try) and len(n.handlers) == 1 and not (n.orelse or n.finalbody):
            self.caught = n.handlers[0].name or "_"  # what a bare raise in the handler raises again
            self.locals.add(self.caught)
            return (f"{indent}try {{\n{self.block(n.body, indent + '  ')}{indent}}} catch ({self.caught}) {{\n"
                    f"{self.block(n.handlers[0].body, indent + '  ')}{indent}}}\n")
        if isinstance(n, ast.While) and not n.orelse:
            return f"{indent}while ({self.test(n.test)}) {{\n{self.block(n.body, indent + '  ')}{indent}}}\n"
        if isinstance(n, ast.For) and not n.orelse:
            return (f"{indent}for ({self.expr(n.target)} of py.iter({self.expr(n.iter)})) {{\n"
                    f"{self.block(n.body, indent + '  ')}{indent}}}\n")
        raise ValueError(f"pyjs: {self.where(n)}: the statement {ast.dump(n)[:100]} is not printed")

    def where(self, n) -> str:
        return f"{self.obj.__module__}.{self.obj.__qualname__} line {getattr(n, 'lineno', '?')}"

    # -- expressions
    def test(self, n) -> str:
        """``n`` as a JavaScript condition (Python's truth: an empty list or dict is false)."""
        boolean = isinstance(n, ast.Compare) or isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)
        return self.expr(n) if boolean else f"py.bool({self.expr(n)})"

    def expr(self, n) -> str:  # noqa: C901 (one case per node printed)
        e = self.expr
        if isinstance(n, ast.Constant):
            if n.value is None or isinstance(n.value, bool):
                return {None: "null", True: "true", False: "false"}[n.value]
            if isinstance(n.value, float):
                return f"new PyFloat({n.value!r})"
            return json.dumps(n.value)
        if isinstance(n, ast.Name):
            return self.name(n)
        if isinstance(n, ast.JoinedStr):
            parts = []
            for v in n.values:
                if isinstance(v, ast.Constant):
                    parts.append(json.dumps(v.value))
                elif v.format_spec is None and v.conversion in (-1, ord("r"), ord("s")):
                    parts.append(f"py.{'repr' if v.conversion == ord('r') else 'str'}({e(v.value)})")
                else:
                    raise ValueError(f"pyjs: {self.where(n)}: a format spec is not printed")
            return "(" + " + ".join(parts or ['""']) + ")"
        if isinstance(n, ast.Attribute) and n.attr == "__name__" and isinstance(n.value, ast.Call):
            return e(n.value)  # type(x).__name__: py.type names the type
        if isinstance(n, ast.Attribute):
            where, value = self.static(n)
            return f"{e(n.value)}.{n.attr}" if where is None else self.p.resolve(value, where)
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) and n.slice.step is None:
            lo, hi = (e(x) if x is not None else "null" for x in (n.slice.lower, n.slice.upper))
            return f"py.slice({e(n.value)}, {lo}, {hi})"
        if isinstance(n, ast.Subscript):
            return f"py.getitem({e(n.value)}, {e(n.slice)})"
        if isinstance(n, ast.Starred):
            return "..." + e(n.value)
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return "[" + ", ".join(e(x) for x in n.elts) + "]"
        if isinstance(n, ast.Dict):
            items = [f"...py.items({e(v)})" if k is None else f"[{e(k)}, {e(v)}]" for k, v in zip(n.keys, n.values)]
            return f"new Map([{', '.join(items)}])"
        if isinstance(n, ast.IfExp):
            return f"({self.test(n.test)} ? {e(n.body)} : {e(n.orelse)})"
        if isinstance(n, ast.BoolOp):
            op = "and" if isinstance(n.op, ast.And) else "or"
            out = e(n.values[-1])
            for v in reversed(n.values[:-1]):
                out = f"py.{op}({e(v)}, () => {out})"
            return out
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.Not):
                return f"!{self.test(n.operand)}"
            if isinstance(n.op, ast.USub):
                return f"py.sub(0, {e(n.operand)})"
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return f"py.{_OPS[type(n.op)]}({e(n.left)}, {e(n.right)})"
        if isinstance(n, ast.Compare):
            parts, left = [], n.left
            for op, right in zip(n.ops, n.comparators):
                if isinstance(op, (ast.Is, ast.IsNot)):
                    parts.append(f"({e(left)} {'===' if isinstance(op, ast.Is) else '!=='} {e(right)})")
                else:
                    parts.append(f"py.{_CMP[type(op)]}({e(left)}, {e(right)})")
                left = right
            return "(" + " && ".join(parts) + ")"
        if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.comprehension(n.generators, lambda: e(n.elt))
        if isinstance(n, ast.DictComp):
            return f"new Map({self.comprehension(n.generators, lambda: f'[{e(n.key)}, {e(n.value)}]')})"
        if isinstance(n, ast.Call):
            return self.call(n)
        if isinstance(n, ast.Lambda):
            self.locals |= {a.arg for a in n.args.args}
            return f"(({', '.join(_ident(a.arg) for a in n.args.args)}) => {e(n.body)})"
        raise ValueError(f"pyjs: {self.where(n)}: {ast.dump(n)[:100]} is not printed")

    def comprehension(self, gens, elt) -> str:
        """A list of ``elt`` over ``gens`` (Python's comprehension: nested loops, each filtered)."""
        g = gens[0]
        self.locals |= {t.id for t in ast.walk(g.target) if isinstance(t, ast.Name)}
        inner = elt() if len(gens) == 1 else self.comprehension(gens[1:], elt)
        src = f"py.iter({self.expr(g.iter)})"
        args = self.expr(g.target)
        if isinstance(g.target, ast.Tuple):  # (k, _, _): an arrow's parameters, ``_`` an elision
            args = "[" + ", ".join("" if isinstance(x, ast.Name) and x.id == "_" else self.expr(x)
                                   for x in g.target.elts) + "]"
        for cond in g.ifs:
            src = f"{src}.filter(({args}) => {self.test(cond)})"
        return f"{src}.{'map' if len(gens) == 1 else 'flatMap'}(({args}) => {inner})"

    def name(self, n) -> str:
        if n.id == "self":
            return "this"
        if n.id in self.locals:
            return _ident(n.id)
        if n.id in _TYPES and n.id not in self.globals:
            return json.dumps(n.id)
        if n.id in ("True", "False", "None"):
            return {"True": "true", "False": "false", "None": "null"}[n.id]
        if n.id not in self.globals:
            raise ValueError(f"pyjs: {self.where(n)}: the name {n.id} is not printed")
        return self.p.resolve(self.globals[n.id], f"{self.module}.{n.id}")

    def static(self, n):
        """(name, Python value) of a module-level attribute chain (``FAMILY.dimensions``, ``families.wrapper``:
        resolved at generation), or (None, None) when its root is a local."""
        chain = []
        while isinstance(n, ast.Attribute):
            chain.insert(0, n.attr)
            n = n.value
        if not isinstance(n, ast.Name) or n.id in self.locals or n.id not in self.globals:
            return None, None
        value = self.globals[n.id]
        for attr in chain:
            value = getattr(value, attr, None)
        return ".".join([self.module, n.id, *chain]), value

    def call(self, n) -> str:
        e, f = self.expr, n.func
        args = [e(a) for a in n.args]
        if isinstance(f, ast.Name) and f.id in _BUILTINS and f.id not in self.globals and f.id not in self.locals:
            kw = {k.arg: e(k.value) for k in n.keywords}
            if set(kw) - {"key", "default"} or kw and f.id not in ("min", "max") or len(args) > 1 and kw:
                raise ValueError(f"pyjs: {self.where(n)}: {f.id}() with keywords {sorted(kw)} is not printed")
            if kw:  # min/max of one iterable: key=, default= (None: no key; undefined: none, an empty one raises)
                return f"py.{f.id}_of({args[0]}, {kw.get('key', 'null')}, {kw.get('default', 'undefined')})"
            return f"py.{f.id}({', '.join(args)})"
        if isinstance(f, ast.Attribute) and not self.p.known(self.static(f)[1]):
            obj = e(f.value)
            if f.attr in self.p.signatures:  # a method of a printed class
                return f"{obj}.{f.attr}({', '.join(self.keywords(f.attr, args, n.keywords))})"
            if f.attr not in _METHODS:
                return f"{obj}.{f.attr}({', '.join(args)})"
            return f"py.m.{f.attr}({', '.join([obj, *args] + [self.mapping(n.keywords)] * bool(n.keywords))})"
        callee = e(f)
        if callee in self.p.fields:  # a dataclass: new C({field: value})
            kw = [ast.keyword(f, a) for f, a in zip(self.p.fields[callee], n.args)] + n.keywords
            return f"new {callee}(Object.fromEntries({self.mapping(kw)}))"
        if callee in self.p.signatures:
            return f"{callee}({', '.join(self.keywords(callee, args, n.keywords))})"
        args += [self.mapping(n.keywords)] * bool(n.keywords)  # a native's (dataclasses.replace): one mapping
        return f"{'new ' if callee in self.p.classes else ''}{callee}({', '.join(args)})"

    def mapping(self, keywords) -> str:
        """Keyword arguments (and ``**x``) as one Map: what str.format, dict.update, a native or ``**kw`` receive."""
        return self.expr(ast.Dict([None if k.arg is None else ast.Constant(k.arg) for k in keywords],
                                  [k.value for k in keywords]))

    def keywords(self, name, args, keywords) -> list:
        """The positional arguments of a call of ``name`` with ``keywords`` (``undefined``: the parameter's default;
        the others, of a ``**kw`` parameter, one mapping)."""
        params = self.p.signatures[name]
        names = [x.name for x in params]
        out = list(args) + ["undefined"] * (len(params) - len(args))
        for k in keywords:
            if k.arg in names:
                out[names.index(k.arg)] = self.expr(k.value)
        rest = [k for k in keywords if k.arg not in names]
        if rest:
            out[[x.kind for x in params].index(inspect.Parameter.VAR_KEYWORD)] = self.mapping(rest)
        while out and out[-1] == "undefined":
            out.pop()
        return out
