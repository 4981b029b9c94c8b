"""Megatron-LM's two small list grammars a launch file carries, parsed by hand (Megatron evaluates the first with
Python's eval; memsym never evaluates anything it reads): ``--moe-layer-freq`` and
``--pipeline-model-parallel-layout``."""
from __future__ import annotations

import re
from typing import List

from symbolic.errors import ConfigError

from derivations.config.limits import LAYERS
from derivations.config.launch import shown


def layer_pattern(text: str, what: str = "--moe-layer-freq") -> List[int]:
    """Megatron's list expression of 0s and 1s (``([0]*3+[1]*13)``, ``([1]*3+[0]*1)*3``, ``[0,1,1]``), parsed
    by hand (Megatron evaluates it; memsym never does): expr = term ('+' term)*, term = atom ('*' N)* or
    N '*' atom, atom = '[' N (',' N)* ']' or '(' expr ')'; at most 10^4 entries, nested at most 32 deep."""
    s = re.sub(r"\s+", "", text)
    pos, depth = 0, 0

    def fail(message):
        return ConfigError("from-megatron", f"{what} {shown(text[:60])!r}{'...' if len(text) > 60 else ''}: "
                                            f"{message}")

    def number():
        nonlocal pos
        m = re.compile(r"[0-9]{1,6}").match(s, pos)
        if m is None:
            raise fail(f"expected a number at character {pos + 1}")
        pos = m.end()
        return int(m.group())

    def atom():
        nonlocal pos, depth
        depth += 1
        if depth > 32:
            raise fail(f"nested more than 32 deep at character {pos + 1}")
        try:
            return _atom()
        finally:
            depth -= 1

    def _atom():
        nonlocal pos
        if pos < len(s) and s[pos] == "[":
            pos += 1
            items = [number()]
            while pos < len(s) and s[pos] == ",":
                pos += 1
                items.append(number())
            if pos >= len(s) or s[pos] != "]":
                raise fail(f"expected ']' at character {pos + 1}")
            pos += 1
            return items
        if pos < len(s) and s[pos] == "(":
            pos += 1
            items = expr()
            if pos >= len(s) or s[pos] != ")":
                raise fail(f"expected ')' at character {pos + 1}")
            pos += 1
            return items
        if pos < len(s) and s[pos].isdigit():
            k = number()
            if pos >= len(s) or s[pos] != "*":
                raise fail(f"expected '*' after {k} at character {pos + 1}")
            pos += 1
            return times(atom(), k)
        raise fail(f"expected '[' or '(' at character {pos + 1}")

    def times(items, k):
        if len(items) * k > LAYERS:
            raise fail(f"more than {LAYERS} entries")
        return items * k

    def term():
        nonlocal pos
        items = atom()
        while pos < len(s) and s[pos] == "*":
            pos += 1
            items = times(items, number())
        return items

    def expr():
        nonlocal pos
        items = term()
        while pos < len(s) and s[pos] == "+":
            pos += 1
            items = items + term()
            if len(items) > LAYERS:
                raise fail(f"more than {LAYERS} entries")
        return items

    out = expr()
    if pos != len(s):
        raise fail(f"unexpected {s[pos]!r} at character {pos + 1}")
    if any(x not in (0, 1) for x in out):
        raise fail("entries must be 0 (dense) or 1 (MoE)")
    return out


def pipeline_layout(text: str) -> List[str]:
    """Megatron's --pipeline-model-parallel-layout as its virtual stages, each a string of E (embedding),
    t (decoder layer), m (MTP), L (loss): megatron/core/transformer/pipeline_parallel_layer_layout.py
    parse_str_to_list (commas dropped, ``(...)*n`` then ``x*n`` unrolled, split at '|'), with the unrolling
    bounded (at most 10^4 characters)."""
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
