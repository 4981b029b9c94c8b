"""PyTorch's CUDA caching allocator simulated, one stream, exact integers: ``c10/cuda/CUDACachingAllocator.cpp``
(pytorch/pytorch@001074d25084fdb87a799823e395a50f5ec044d3, ``DeviceCachingAllocator``).

Requests rounded to 512 B (``round_size``); <= 1 MiB from the small pool; new segments (``get_allocation_size``)
of 2 MiB, 20 MiB below 10 MiB, else rounded to 2 MiB; best fit (``get_free_block``) within ``max_split_size`` and
``kLargeBuffer``; splitting per ``should_split``; frees merge with free neighbours (``free_block``); on running out
the unsplit free segments are released and the request retried (``release_cached_blocks``), and with a
``garbage_collection_threshold`` before a new segment above it (``garbage_collect_cached_blocks``);
``expandable_segments`` grow one segment per pool by 2 or 20 MiB pages.  ``PYTORCH_CUDA_ALLOC_CONF``:
:func:`settings`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from derivations.assembly import overheads_device as od
from symbolic.errors import ConfigError
from symbolic.jsonfile import shown

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
SOURCE = "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp@001074d25084fdb87a799823e395a50f5ec044d3"


@dataclass(frozen=True)
class Settings:
    """The allocator options that change its bytes (CUDAAllocatorConfig): ``max_split`` bytes (None: unlimited),
    ``expandable`` segments, ``gc`` the garbage-collection threshold as a fraction of the capacity (None: off)."""

    max_split: Optional[int] = None
    expandable: bool = False
    gc: Optional[float] = None


#: Options c10/cuda/CUDAAllocatorConfig.cpp (parseArgs) accepts that do not change the native allocator's bytes in
#: this simulation (threads, locks, pinned host memory); roundup_power2_divisions, max_non_split_rounding_mb and
#: backend:cudaMallocAsync do change them and are refused as not modelled
INERT = ("release_lock_on_cudamalloc", "pinned_use_cuda_host_register", "pinned_num_register_threads",
         "pinned_use_background_threads", "backend:native")


#: CUDAAllocatorConfig's clamp of max_split_size_mb: std::numeric_limits<size_t>::max() / (1024 * 1024)
MAX_SPLIT_MB = (2 ** 64 - 1) >> 20


def settings(conf: str = "") -> Settings:
    """The :class:`Settings` of a ``PYTORCH_CUDA_ALLOC_CONF`` string (``key:value`` pairs, comma-separated), checked
    as CUDAAllocatorConfig::parseArgs checks it: an unknown key, ``max_split_size_mb`` not an integer > 20 (its
    kLargeBuffer in MiB; above :data:`MAX_SPLIT_MB`, where PyTorch clamps it), ``expandable_segments`` other than
    True/False, ``garbage_collection_threshold`` outside (0, 1) are refused; keys it accepts that change bytes
    memsym does not simulate are refused as not modelled."""
    out = {}
    for item in filter(None, (w.strip() for w in (conf or "").split(","))):
        key, _, value = item.partition(":")
        ok = True
        if key == "max_split_size_mb":
            ok = value.isascii() and value.isdigit() and len(value) < 20 and 20 < int(value) <= MAX_SPLIT_MB
            out["max_split"] = int(value) << 20 if ok else 0
        elif key == "expandable_segments":
            ok = value in ("True", "False")
            out["expandable"] = value == "True"
        elif key == "garbage_collection_threshold":
            try:
                out["gc"] = float(value) if value.isascii() else 0.0
            except ValueError:
                out["gc"] = 0.0
            ok = 0 < out["gc"] < 1
        elif key in INERT or item in INERT:
            continue
        elif key in ("roundup_power2_divisions", "max_non_split_rounding_mb", "backend"):
            raise ConfigError("alloc-conf", f"PYTORCH_CUDA_ALLOC_CONF {shown(item)}: not modelled (memsym simulates "
                                            "the native caching allocator's default rounding)")
        else:
            raise ConfigError("alloc-conf", f"PYTORCH_CUDA_ALLOC_CONF {shown(item)}: PyTorch refuses it (Unrecognized "
                                            "CachingAllocator option)")
        if not ok:
            raise ConfigError("alloc-conf", f"PYTORCH_CUDA_ALLOC_CONF {shown(item)}: not a value PyTorch accepts" + (
                f" (an integer from 21 to {MAX_SPLIT_MB}, where it clamps)" if key == "max_split_size_mb" else ""))
    return Settings(**out)


def round_size(size: int) -> int:
    """``round_size``: at least 512 B, a multiple of 512 B."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the bytes of the segment a (rounded) request makes."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class _Block:
    __slots__ = ("size", "segment", "free")

    def __init__(self, size: int, segment: List["_Block"]):
        self.size, self.segment, self.free = size, segment, True


class OutOfMemory(Exception):
    """The request does not fit the capacity even after the cached segments are released."""


class Allocator:
    """One device's caching allocator: :meth:`malloc` (an id) and :meth:`free`; ``allocated`` and ``reserved`` now
    and at their peaks (``memory_stats`` allocated_bytes / reserved_bytes all.current and .peak)."""

    def __init__(self, options: Settings = Settings(), capacity: Optional[int] = None):
        self.o, self.capacity = options, capacity
        self.segments: Dict[bool, List[List[_Block]]] = {True: [], False: []}  # by pool: small?
        self.live: Dict[int, _Block] = {}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self._next = 0

    def _split_ok(self, block: _Block, size: int, small: bool) -> bool:
        rest = block.size - size
        if small or self.o.expandable:
            return rest >= MIN_BLOCK
        return (self.o.max_split is None or size < self.o.max_split) and rest > SMALL_SIZE

    def _best_fit(self, size: int, small: bool) -> Optional[_Block]:
        cap = self.o.max_split
        fits = [b for seg in self.segments[small] for b in seg if b.free and b.size >= size]
        if self.o.expandable:  # the free end of the segment can grow: it fits by its expandable size
            fits = [b for b in fits if b is not b.segment[-1]] or fits
        if not fits:
            return None
        best = min(fits, key=lambda b: b.size)
        if cap is not None and ((size < cap <= best.size) or (size >= cap and best.size >= size + LARGE_BUFFER)):
            return None
        return best

    def _grow(self, size: int, small: bool) -> _Block:
        """A new segment (or, expandable, more pages at the end of the pool's one); OutOfMemory over capacity."""
        if self.o.expandable:
            page = SMALL_BUFFER if small else LARGE_BUFFER
            if not self.segments[small]:
                self.segments[small].append([])
            seg = self.segments[small][0]
            tail = seg[-1] if seg and seg[-1].free else None
            need = -(-(size - (tail.size if tail else 0)) // page) * page
            self._reserve(need)
            if tail:
                tail.size += need
                return tail
            seg.append(_Block(need, seg))
            return seg[-1]
        need = allocation_size(size)
        self._reserve(need)
        seg: List[_Block] = []
        seg.append(_Block(need, seg))
        self.segments[small].append(seg)
        return seg[0]

    def _reserve(self, need: int) -> None:
        if self.capacity is not None and self.reserved + need > self.capacity:
            raise OutOfMemory(need)
        self.reserved += need
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release_cached(self, only_large: bool = False) -> None:
        """``release_cached_blocks``: unsplit free segments back to CUDA (expandable: the free pages at the end)."""
        for small in ((False,) if only_large else (True, False)):
            keep = []
            for seg in self.segments[small]:
                if self.o.expandable:
                    if seg and seg[-1].free:
                        self.reserved -= seg.pop().size
                    keep.append(seg)
                elif len(seg) == 1 and seg[0].free:
                    self.reserved -= seg[0].size
                else:
                    keep.append(seg)
            self.segments[small] = keep

    def malloc(self, nbytes: int) -> int:
        """Allocate ``nbytes``; its id for :meth:`free`."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(size, small)
        if block is None:
            if self.o.gc is not None and self.capacity is not None and self.reserved > self.o.gc * self.capacity:
                self._release_cached(only_large=True)
            try:
                block = self._grow(size, small)
            except OutOfMemory:
                self._release_cached()
                block = self._grow(size, small)
        seg = block.segment
        if self._split_ok(block, size, small):
            i = seg.index(block)
            rest = _Block(block.size - size, seg)
            block.size = size
            seg.insert(i + 1, rest)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self._next += 1
        self.live[self._next] = block
        return self._next

    def free(self, ident: int) -> None:
        """Free an allocation: its block merges with its free neighbours (the segment stays reserved)."""
        block = self.live.pop(ident)
        block.free = True
        self.allocated -= block.size
        seg = block.segment
        i = seg.index(block)
        if i + 1 < len(seg) and seg[i + 1].free:
            block.size += seg.pop(i + 1).size
        if i > 0 and seg[i - 1].free:
            seg[i - 1].size += seg.pop(i).size


def run(events: Iterable[Tuple[str, object, int]], options: Settings = Settings(),
        capacity: Optional[int] = None) -> Allocator:
    """Run ``events`` — ("malloc", key, bytes) or ("free", key, 0) — through a fresh :class:`Allocator`."""
    a, ids = Allocator(options, capacity), {}
    for op, key, nbytes in events:
        if op == "malloc":
            ids[key] = a.malloc(nbytes)
        else:
            a.free(ids.pop(key))
    return a


#: What ``--memory`` can judge against a capacity: the allocated bytes (the allocator's peak, the terms rounded as it
#: rounds them), the reserved bytes (its segments), the device's (reserved + the buffers outside the allocator).
KINDS = ("allocated", "reserved", "device")


def memory(est, alloc_conf: str = "", dispatcher: str = "alltoall", buffsize: int = od.BUFFSIZE,
           domain: int = 8) -> dict:
    """{allocated, reserved, buffers, graph_pool, device}: the allocator's peaks over the step of ``est``
    (:func:`run` on derivations/assembly/overheads_device.py ``reserved_events``), the buffers outside it
    (``buffers``) and the CUDA graphs' private pool (derivations/assembly/graphs.py ``graph.pool``: its segments,
    reserved beside the step's and never reused by it, taken as one; the allocated peak the capture's when larger), on
    NVLink domains of ``domain`` GPUs."""
    a = run(od.reserved_events(est), settings(alloc_conf))
    h = est.model.named().get("h", 0)
    act = dict(est.training.bytes).get("B_a", 2)
    bufs = od.buffers(est.layout, h, act, dispatcher or "alltoall", buffsize or od.BUFFSIZE, domain=domain,
                      stage=est.stage.index, wrap=est.training.schedule == "interleaved")
    pool = est.bytes.get("graph_pool", 0)
    pool = allocation_size(round_size(-(-pool // 1))) if pool else 0
    reserved = a.peak_reserved + pool
    return {"allocated": max(a.peak_allocated, -(-est.bytes["step_total"] // 1)) if pool else a.peak_allocated,
            "reserved": reserved, "buffers": bufs, "graph_pool": pool,
            "device": reserved + sum(b.bytes for b in bufs), "alloc_conf": alloc_conf or ""}


def largest(candidates: List[int], judged, capacity: int) -> Tuple[int, Optional[int]]:
    """(the largest of the ascending ``candidates`` whose ``judged(x)`` bytes fit ``capacity``, 0 when none does;
    the bytes there or None), by bisection: the judged memory grows with b and s."""
    lo, hi, best, at = 0, len(candidates), 0, None
    while lo < hi:
        mid = (lo + hi) // 2
        got = judged(candidates[mid])
        if got <= capacity:
            best, at, lo = candidates[mid], got, mid + 1
        else:
            hi = mid
    return best, at
