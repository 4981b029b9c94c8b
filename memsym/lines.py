"""Text a user typed, shown on one terminal line (shared by the command line's errors and progress)."""
from __future__ import annotations


def one_line(message) -> str:
    """``message`` as one line: control characters a user typed (a newline in a path or an
    argument) are shown escaped (``\\n``), so stderr holds exactly the one line exit 2 promises
    and a progress or file line cannot be split or forged by a path."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(message))
