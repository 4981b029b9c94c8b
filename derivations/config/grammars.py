"""Megatron-LM's two small list grammars a launch file carries: ``--moe-layer-freq`` (Megatron evaluates it with
Python's eval; memsym parses it and never evaluates anything it reads) and ``--pipeline-model-parallel-layout``."""
from __future__ import annotations

import ast
import itertools
import re
from typing import List

from symbolic.errors import ConfigError

from derivations.config.limits import LAYERS
from derivations.config.launch import shown


def layer_pattern(text: str, what: str = "--moe-layer-freq") -> List[int]:
    """Megatron's list expression of 0s and 1s (``([0]*3+[1]*13)``; arguments.py moe_freq_type evals it): parsed by
    :func:`ast.parse`, never evaluated; at most 10^4 entries, nested at most 32 deep."""
    def fail(message):
        return ConfigError("from-megatron", f"{what} {shown(text[:60])!r}{'...' if len(text) > 60 else ''}: "
                                            f"{message}")

    if max(itertools.accumulate((c in "([") - (c in ")]") for c in text), default=0) > 32:
        raise fail("nested more than 32 deep")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise fail(f"not a Python list expression ({getattr(exc, 'msg', None) or type(exc).__name__})") from None

    def number(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    def value(node) -> List[int]:
        if isinstance(node, ast.List) and node.elts and all(number(e) for e in node.elts):
            return [e.value for e in node.elts]
        op = type(getattr(node, "op", None))
        if op is ast.Add:
            items = value(node.left) + value(node.right)
        elif op is ast.Mult and (number(node.left) or number(node.right)):
            k, inner = (node.left, node.right) if number(node.left) else (node.right, node.left)
            items = value(inner)
            if len(items) * k.value > LAYERS:
                raise fail(f"more than {LAYERS} entries")
            items = items * k.value
        else:
            raise fail(f"expected lists of integers joined by '+' and repeated by '*' N at character "
                       f"{node.col_offset + 1}")
        if len(items) > LAYERS:
            raise fail(f"more than {LAYERS} entries")
        return items

    out = value(tree)
    if any(x not in (0, 1) for x in out):
        raise fail("entries must be 0 (dense) or 1 (MoE)")
    return out


def pipeline_layout(text: str) -> List[str]:
    """--pipeline-model-parallel-layout as its virtual stages (strings of E, t, m, L), as parse_str_to_list reads it."""
    s = text.replace(",", "").replace(" ", "")

    def fail(message):
        return ConfigError("from-megatron", f"--pipeline-model-parallel-layout {text!r}: {message}")
    for pattern in (re.compile(r"\(([^)]+)\)\*(\d{1,5})"), re.compile(r"(.)\*(\d{1,5})")):
        size = len(s) + sum(len(m.group(1)) * int(m.group(2)) for m in pattern.finditer(s))
        if size > LAYERS:
            raise fail(f"unrolls to more than {LAYERS} characters")
        s = pattern.sub(lambda m: m.group(1) * int(m.group(2)), s)  # one pass each, as Megatron's re.sub
    bad = sorted(set(s) - set("EtmL|"))
    if bad:
        raise fail(f"unknown layer character {bad[0]!r} (Megatron's: E, t, m, L and |)")
    return s.split("|")
