"""The paper's printed numbers (``paper/printed.toml``) against derived values: ``agrees`` (rounds to the printed one at
its precision), ``discrepancy`` (it does not, the entry records the cause and pins the exact derived value
``derived_exact``, in params for params and B entries, in bytes for bytes and GB), and the failures ``UNEXPLAINED`` (no
cause recorded), ``stale`` (a cause, but the numbers agree), ``MISMATCH`` (the derived value is not the pinned one) and
``UNPINNED`` (a cause without a pinned value)."""
from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from derivations.config import ConfigError, GiB

from symbolic import tomlfile  # noqa: E402
from symbolic.jsonfile import Bounds  # noqa: E402
from symbolic.resources import PAPER_DIR  # noqa: E402

#: a paper data file (paper/printed.toml, or reproduce --data): some hundred KiB of [[entry]] tables
PAPER_DATA = Bounds(max_bytes=4 << 20, max_depth=8, max_digits=40, name="TOML paper data file",
                    typical="some hundred KiB", nests=3, reading="the paper data file")
UNIT_SCALE = {"B": Fraction(10 ** 9), "GB": Fraction(GiB), "params": Fraction(1), "bytes": Fraction(1)}
BYTE_UNITS = {"GB", "bytes"}


@dataclass(frozen=True)
class Entry:
    id: str
    table: str
    row: str
    column: str
    printed: str
    value: Fraction
    unit: str
    decimals: int
    terms: Tuple[str, ...]
    at: Dict
    discrepancy: str = ""
    source: str = "paper"
    pinned: Optional[Fraction] = None  # ``derived_exact`` of the data file: the exact derived value, hand-derived

    @property
    def place(self) -> str:
        return f"{self.table}, {self.row}, {self.column}"


@dataclass(frozen=True)
class Result:
    entry: Entry
    derived: Fraction          # in the entry's unit
    derived_exact: Fraction    # params or bytes, exact
    numeric: float             # the same through the lambdified functions (entry's unit)
    status: str

    @property
    def ok(self) -> bool:
        return self.status in ("agrees", "discrepancy")

    def derived_text(self) -> str:
        x, decimals = self.derived, self.entry.decimals
        d = (Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_EVEN)
        return f"{d:,}" if decimals == 0 else f"{d:,.{decimals}f}"


def rounds_to(x: Fraction, printed: Fraction, decimals: int) -> bool:
    """True if x lies within half a unit of the printed last digit of ``printed``."""
    half = Fraction(1, 2) * Fraction(10) ** (-decimals)
    return abs(x - printed) <= half


def load(path: Optional[Path] = None) -> Tuple[Dict, List[Entry]]:
    """Read the paper data file: (meta, entries); ConfigError names a malformed entry."""
    path = Path(path or PAPER_DIR / "printed.toml")
    data = tomlfile.read(path, PAPER_DATA, lambda p, _, message: ConfigError("paper-data", f"{p}: {message}"))
    if not data.get("entry") and not data.get("rederived"):
        raise ConfigError("paper-data", f"{path}: no [[entry]] or [[rederived]] tables: not a paper data file "
                                        f"(paper/printed.toml's form)")
    entries = []
    for kind in ("entry", "rederived"):
        for raw in data.get(kind, []):
            try:
                terms = raw["term"]
                terms = (terms,) if isinstance(terms, str) else tuple(terms)
                unit = raw["unit"]
                if unit not in UNIT_SCALE:
                    raise ValueError(f"unit {unit!r}")
                entries.append(Entry(
                    id=raw["id"], table=raw["table"], row=raw["row"], column=raw["column"],
                    printed=str(raw["printed"]), value=Fraction(str(raw["value"])), unit=unit,
                    decimals=int(raw.get("decimals", 0)), terms=terms, at=dict(raw.get("at", {})),
                    discrepancy=raw.get("discrepancy", ""),
                    source="paper" if kind == "entry" else raw.get("source", "digest sec. 9"),
                    pinned=_pinned(raw)))
            except (KeyError, ValueError) as exc:
                raise ConfigError("paper-data", f"{path}: malformed {kind} {raw.get('id', '?')}: {exc}") from None
    ids = [e.id for e in entries]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError("paper-data", f"{path}: duplicate entry ids {sorted(dup)}")
    return data.get("meta", {}), entries


def _pinned(raw) -> Optional[Fraction]:
    """The entry's ``derived_exact``: an exact integer or rational (never a float)."""
    pin = raw.get("derived_exact")
    if pin is None:
        if raw.get("discrepancy"):
            raise ValueError("a discrepancy must pin the exact derived value (derived_exact = \"...\")")
        return None
    if isinstance(pin, bool) or not isinstance(pin, (str, int)):
        raise ValueError(f"derived_exact must be an exact integer or rational string, got {pin!r}")
    try:
        return Fraction(pin) if isinstance(pin, int) else Fraction(pin.replace("_", "").replace(",", ""))
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"derived_exact {pin!r} is not an exact integer or rational") from None


def judge(entry: Entry, derived_exact: Fraction, numeric: float, term_unit: str, bytes_per_param: int) -> Result:
    """Compare one entry with its derived exact value (in the term's unit)."""
    value = derived_exact
    if entry.unit in BYTE_UNITS and term_unit == "params":
        value = value * bytes_per_param
        numeric = numeric * bytes_per_param
    derived = value / UNIT_SCALE[entry.unit]
    numeric = float(numeric) / float(UNIT_SCALE[entry.unit])
    agrees = rounds_to(derived, entry.value, entry.decimals)
    if entry.pinned is not None and value != entry.pinned:
        status = "MISMATCH"
    elif agrees:
        status = "stale" if entry.discrepancy else "agrees"
    elif not entry.discrepancy:
        status = "UNEXPLAINED"
    else:
        status = "discrepancy" if entry.pinned is not None else "UNPINNED"
    return Result(entry, derived, value, numeric, status)
