"""memsym terms: every term id with its meaning, unit and provenance."""
from __future__ import annotations

from . import common


def add_parser(sub):
    common.build(sub, "terms", run)


def run(args) -> int:
    from derivations import build
    terms = build(common.model_from_args(args))
    if args.json:
        common.print_json([{"id": t.id, "unit": t.unit, "provenance": t.provenance, "meaning": t.meaning,
                            "symbol": t.symbol, "parts": [p.key for p in t.parts],
                            **({"expr": str(t.expr)} if args.expr else {})} for t in terms.values()])
        return 0
    width = max(len(t) for t in terms)
    for t in terms.values():
        print(f"{t.id:<{width}}  {t.unit:<6}  {t.provenance}: {t.meaning}")
        if args.expr:
            print(f"{'':<{width}}  = {t.expr}")
        if args.parts:
            for part in t.parts:
                print(f"{'':<{width}}  {t.id}:{part.key}  {part.label}")
    return 0
