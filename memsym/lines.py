"""Text a user typed, shown on one terminal line (shared by the command line's errors and progress), and the
command line's help mode."""
from __future__ import annotations

import re

from symbolic.errors import did_you_mean

#: [True] while ``memsym CMD --help-all`` builds the parser: every option's whole help; --help shows each one's
#: first clause and leaves out the switches that argtypes.help_all marks
HELP_ALL = [False]


def one_line(message) -> str:
    """``message`` as one line: control characters a user typed (a newline in a path or an
    argument) are shown escaped (``\\n``), so stderr holds exactly the one line exit 2 promises
    and a progress or file line cannot be split or forged by a path."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(message))


def near_choice(message: str) -> str:
    """``message`` (argparse's ``argument X: invalid choice: 'v' (choose from ...)``) with `` (did you mean c?)``
    naming the nearest choices (difflib's ratio, as for a mistyped option), or unchanged."""
    choice = re.search(r"argument \S+: invalid choice: '(.*)' \(choose from (.*)\)$", message)
    return message + did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2))) if choice else message
