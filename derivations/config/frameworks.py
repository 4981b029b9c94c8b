"""The training frameworks' own limits on a layout (``--framework``): which ZeRO stages each runs (with and without
pipeline parallelism) and which pipeline schedules, each read from the framework's source.  ``search --framework``
lists only what the framework runs; ``estimate`` warns on a combination it does not run."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from symbolic.errors import ConfigError


@dataclass(frozen=True)
class Framework:
    """``zero``: the ZeRO stages it runs without pipeline parallelism, ``zero_pp`` with PP > 1; ``schedules``:
    memsym's names of the pipeline schedules it runs; ``source``: where each limit is read."""

    name: str
    zero: Tuple[int, ...]
    zero_pp: Tuple[int, ...]
    schedules: Tuple[str, ...]
    source: str

    def refusal(self, zero: int, pp: int, schedule: Optional[str]) -> Optional[str]:
        """Why this framework does not run ZeRO ``zero`` at PP ``pp`` under ``schedule``, or None."""
        allowed = self.zero_pp if pp > 1 else self.zero
        why = []
        if zero not in allowed:
            why.append(f"ZeRO {','.join(map(str, allowed))}{' with PP > 1' if pp > 1 else ''}, not ZeRO {zero}")
        if schedule is not None and pp > 1 and schedule not in self.schedules:
            why.append(f"the schedules {', '.join(self.schedules)}, not {schedule}")
        return f"{self.name} runs {'; and '.join(why)} ({self.source})" if why else None


with open(Path(__file__).with_name("frameworks.toml"), "rb") as _fh:
    FRAMEWORKS = {name: Framework(name, tuple(f["zero"]), tuple(f["zero_pp"]), tuple(f["schedules"]), f["source"])
                  for name, f in tomllib.load(_fh).items()}

#: The framework a conventions preset describes (``--framework``'s default); the paper's view restricts nothing.
OF_CONVENTIONS = {"megatron": "megatron", "mcore": "megatron", "mcore-te": "megatron", "modelzoo": "megatron",
                  "torchtitan": "torchtitan"}


def framework(name: Optional[str], conventions: Optional[str] = None) -> Optional[Framework]:
    """The framework ``--framework`` names, else the one of ``--conventions``, else None."""
    name = name or OF_CONVENTIONS.get(conventions or "")
    if name is None:
        return None
    if name not in FRAMEWORKS:
        raise ConfigError("framework", f"--framework {name!r}: one of {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]
