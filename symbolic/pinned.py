"""Files pinned for this process: the exact bytes a cache key was made from, read once.

:mod:`memsym.memo` keys ``estimate``'s output by the content of every file its command line
names; it pins those bytes here, and the bounded reader of a config.json
(:func:`derivations.hfconfig.read_json`) returns them instead of reading the file again.
The key and the parsed configuration then come from the same bytes, whatever happens to the file
during the run.
"""
from __future__ import annotations

import os
from typing import Dict, Optional

_PINNED: Dict[str, bytes] = {}


def pin(path: str, data: bytes) -> None:
    """Keep ``data`` as the content of ``path`` (an absolute or relative path) for this process."""
    _PINNED[os.path.abspath(path)] = bytes(data)


def pinned(path: str) -> Optional[bytes]:
    """The bytes pinned for ``path``, or None."""
    try:
        return _PINNED.get(os.path.abspath(path))
    except (TypeError, ValueError):
        return None
