"""The training frameworks' own limits on a layout (``--framework``): which ZeRO stages each runs (with and without
pipeline parallelism) and which pipeline schedules, each read from the framework's source.  ``search --framework``
lists only what the framework runs; ``estimate`` warns on a combination it does not run."""
from __future__ import annotations

from dataclasses import dataclass
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


FRAMEWORKS = {f.name: f for f in (
    Framework("megatron", (0, 1), (0, 1), ("1f1b", "interleaved"),
              "Megatron-LM arguments.py: --use-distributed-optimizer shards the optimizer states over DP (ZeRO-1), "
              "the DDP buffers keep whole gradients and parameters; core/pipeline_parallel/schedules.py runs 1F1B "
              "and interleaved 1F1B"),
    Framework("megatron-fsdp", (1, 2, 3), (1, 2, 3), ("1f1b", "interleaved"),
              "Megatron-LM arguments.py --data-parallel-sharding-strategy optim, optim_grads, optim_grads_params "
              "(ZeRO 1, 2, 3) with --use-megatron-fsdp; the pipeline schedules are Megatron-Core's"),
    Framework("torchtitan", (3,), (3,), ("1f1b", "interleaved", "zb"),
              "torchtitan parallelize.py apply_fsdp: FSDP2 fully_shard shards parameters, gradients and optimizer "
              "states (ZeRO-3); job_config.py pipeline_parallel_schedule: 1F1B, Interleaved1F1B, "
              "InterleavedZeroBubble / ZBVZeroBubble"),
    Framework("deepspeed", (0, 1, 2, 3), (0, 1), ("1f1b",),
              "DeepSpeed runtime/pipe/engine.py PipelineEngine.__init__ asserts ZeRO stage < 2 ('ZeRO-2 and ZeRO-3 "
              "are incompatible with pipeline parallelism'); its TrainSchedule is 1F1B"),
)}

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
