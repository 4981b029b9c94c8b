"""The peak of a whole training step, measured by torch's profiler (``memsym trace --step``; explained in
paper/traces/STEP.md).

A forward and backward of a freshly built model under ``torch.profiler.profile(profile_memory=True, ...)``: the
CPU allocator reports each allocation and free with its running total (checked event by event), and
``prof._memory_profile()`` its category.  Activation bytes: what the step made and has not freed, but parameters,
their gradients, kernel scratch (inside one ``aten::`` op) and RNG states.  Ranges (:data:`RANGES`) mark the
phases, the last a collection after the backward (gc is off during the step); the forward's
``Recorder(hold=False)`` names the saved storages by address without changing when anything is freed.
"""
from __future__ import annotations

import gc
import re
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Optional

from torch._C._profiler import _EventType, _TensorMetadata
from torch.profiler import ProfilerActivity, profile, record_function
from torch.profiler._memory_profiler import Category, RecordScope, TensorKey

from .recorder import layer_of, sublayer_of

RANGES = ("memsym.inputs", "memsym.forward", "memsym.backward", "memsym.gc")
_EVALUATE = "autograd::engine::evaluate_function: "
_RNG = "get_state of torch._C.Generator"
#: the checkpoint implementations whose functions recompute in the backward (a layer's own code, outside any
#: submodule, is recomputed in their frames: transformers' decoder layer's residual adds)
_CHECKPOINTS = ("torch/utils/checkpoint.py", "megatron/core/tensor_parallel/random.py")
_COMPILED = re.compile(r"## Call CompiledFxGraph \w+ ##")
_LAYER_PATH = re.compile(r".*?layers\.\d+")


def run(model, make_inputs: Callable, forward: Callable, grads: Callable) -> Dict:
    """Profile one step: ``make_inputs()`` -> a tuple, ``forward(model, *inputs)`` -> (loss, Recorder(hold=False)),
    ``grads(model)`` -> the gradients; :func:`analyse`'s result with the loss and the Recorder."""
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            with record_function(RANGES[0]):
                inputs = make_inputs()
            with record_function(RANGES[1]):
                loss, rec = forward(model, *inputs)
                del inputs
            held = _held_storages(rec)
            with record_function(RANGES[2]):
                loss.backward()
            with record_function(RANGES[3]):  # what only reference cycles held (freed late: gc was off)
                gc.collect()
    finally:
        gc.enable()
    out = analyse(prof, model, held, list(grads(model)))
    out["loss"] = float(loss.detach())
    out["recorder"] = rec
    return out


def _held_storages(rec) -> Dict[int, object]:
    """{data pointer: Saved} of the storages the forward's live saves hold when it ends."""
    out = {}
    for key, r in rec.saved.items():
        st = rec.storage(key)
        if r.alive and st is not None and st.nbytes() > 0:
            out[st.data_ptr()] = r
    return out


class Alloc:
    """One allocation of the step: bytes, made and freed (None: alive at the end), category, dtype and shape, what
    made it (:func:`_origin`), its kind ("activation", or left out: "scratch", "rng", "gradient", "parameter")."""

    __slots__ = ("size", "t0", "t1", "key", "category", "ev", "dtype", "shape", "saved", "origin", "kind")

    def __init__(self, size, t0, key, category, ev):
        self.size, self.t0, self.t1, self.key, self.category, self.ev = size, t0, None, key, category, ev
        self.dtype = self.shape = self.saved = self.origin = None
        self.kind = "activation"

    def live(self, t) -> bool:
        return self.t0 <= t and (self.t1 is None or self.t1 > t)

    def describe(self) -> Dict:
        o = self.origin
        return {"phase": o["phase"], "module": o["module"], "layer": o["layer"], "node": o["node"], "op": o["op"],
                "dtype": self.dtype or "?", "shape": list(self.shape) if self.shape is not None else [],
                "category": self.category.name if self.category is not None else "none"}


def analyse(prof, model, held: Dict[int, object], grads: List) -> Dict:
    """The step's timeline of activation bytes from the profiler's allocation events (module docstring)."""
    mp = prof._memory_profile()
    events = sorted(mp._op_tree.dfs(), key=lambda e: e.start_time_ns)
    ranges = {_name(e): (e.start_time_ns, e.end_time_ns) for e in events
              if e.typed[0] == _EventType.TorchOp and _name(e) in RANGES}
    names = {id(m): n for n, m in model.named_modules()}
    meta = _metadata(events)
    fwd_module = _forward_modules(events, names, ranges)
    checks = []

    # the allocations, in the allocator's order (checked against its running total event by event)
    made: List[Alloc] = []
    live: Dict[int, Alloc] = {}
    at_ptr: Dict[int, Alloc] = {}  # the live allocations by address
    timeline = []  # (time, allocation, +-bytes)
    base, total = None, 0
    for e in events:
        if e.typed[0] != _EventType.Allocation:
            continue
        f = e.typed[1]
        if base is None:
            base = f.total_allocated - f.alloc_size
        total += f.alloc_size
        if base + total != f.total_allocated:
            raise AssertionError(f"the profiler's allocation events disagree with the allocator's running total "
                                 f"({base + total} != {f.total_allocated} at {f.alloc_size:+} bytes)")
        if f.alloc_size > 0:
            if f.ptr in at_ptr:  # its block was freed where the profiler does not see (another thread)
                raise AssertionError(f"{at_ptr[f.ptr].size} bytes at an address allocated again were freed unseen "
                                     f"by the profiler (on a thread it does not follow)")
            key = TensorKey.from_allocation(f)
            a = Alloc(f.alloc_size, e.start_time_ns, key, mp._categories.get(key, 0) if key else None, e)
            a.dtype, a.shape = meta.get(key, (None, None)) if key is not None else (None, None)
            a.origin = _origin(e, ranges, names, fwd_module)
            live[f.allocation_id] = at_ptr[f.ptr] = a
            made.append(a)
            timeline.append((e.start_time_ns, a, f.alloc_size))
        elif f.allocation_id in live:
            a = live.pop(f.allocation_id)
            del at_ptr[f.ptr]
            a.t1 = e.start_time_ns
            timeline.append((e.start_time_ns, a, f.alloc_size))
        # else: the free of a block allocated before the step: not the step's
    checks.append(f"{len(made)} allocations, every event equal to the allocator's running total")

    # parameter gradients: alive at the end at a gradient's address, torch's GRADIENT (checked); other GRADIENT
    # allocations (a recomputed layer's detached inputs' .grad) are activation gradients: counted
    grad_ptrs = {g.untyped_storage().data_ptr(): g.untyped_storage().nbytes() for g in grads}
    for a in made:
        if a.t1 is None and a.ev.typed[1].ptr in grad_ptrs:
            a.kind = "gradient"
            if a.category != Category.GRADIENT:
                raise AssertionError(f"a parameter's gradient ({a.size} bytes) is torch's {a.category}, not GRADIENT")
        elif a.category == Category.PARAMETER:
            a.kind = "parameter"
        else:
            a.kind = _kind(a)
    found = sum(a.size for a in made if a.kind == "gradient")
    if found != sum(grad_ptrs.values()):
        raise AssertionError(f"the step allocated {found} bytes of the {len(grads)} parameters' gradients, not "
                             f"{sum(grad_ptrs.values())}")
    other = [a for a in made if a.category == Category.GRADIENT and a.kind != "gradient"]
    checks.append(f"the {len(grads)} parameter gradients ({found} bytes) are torch's GRADIENT" + (
        f"; {len(other)} other allocations torch calls GRADIENT ({sum(a.size for a in other)} bytes: leaves' .grad "
        f"made in the backward, activation gradients) are counted" if other else ""))
    # torch's PARAMETER is per tensor id: no tensor moves between it and the rest across versions
    cats = defaultdict(set)
    for (key, version) in mp._category_snapshot():
        cats[key].add(mp._categories.get(key, version) == Category.PARAMETER)
    moving = [k for k, v in cats.items() if len(v) > 1]
    if moving:
        raise AssertionError(f"{len(moving)} tensors change between PARAMETER and the other categories across "
                             f"their versions")
    cycles = [a for a in made if a.t1 is not None and ranges[RANGES[3]][0] <= a.t1 <= ranges[RANGES[3]][1]]

    # what the forward's live saves hold when it ends, by address
    t_fwd = ranges[RANGES[1]][1]
    for a in made:
        if a.live(t_fwd):
            a.saved = held.get(a.ev.typed[1].ptr)
    saved_total = sum(r.nbytes for r in held.values())
    matched = sum(a.size for a in made if a.saved is not None)
    if matched != saved_total:
        checks.append(f"{saved_total - matched} bytes saved at the end of the forward were not allocated by the step")

    # the timeline of activation bytes (and of every allocation but parameters and gradients)
    cur = every = 0
    peak, peak_t, peak_a, fwd_peak, fwd_peak_a, allocated = -1, None, None, -1, None, 0
    end_fwd = 0
    layers: Dict = {}
    rises = []  # the activation bytes after each allocation: how many times the peak is reached
    by_kind, most = Counter(), Counter()  # live bytes of each kind, and their most (scratch, rng: left out)
    for t, a, delta in timeline:
        if a.kind in ("gradient", "parameter"):
            continue
        every += delta
        allocated = max(allocated, every)
        by_kind[a.kind] += delta
        most[a.kind] = max(most[a.kind], by_kind[a.kind])
        if a.kind != "activation":
            continue
        cur += delta
        if delta > 0:
            rises.append(cur)
        if t <= t_fwd:
            end_fwd = cur
            if cur > fwd_peak:
                fwd_peak, fwd_peak_a = cur, a
        if cur > peak:
            peak, peak_t, peak_a = cur, t, a
        if delta > 0 and t > t_fwd and cur > layers.get(a.origin["layer"], (-1,))[0]:
            layers[a.origin["layer"]] = (cur, a)
    counted = [a for a in made if a.kind == "activation"]
    cycles_set = set(cycles)
    at_peak = [a for a in counted if a.live(peak_t)]
    at_end = [a for a in counted if a.live(t_fwd)]
    checks.append(f"held only by reference cycles (freed by a collection after the step): "
                  f"{sum(a.size for a in cycles)} bytes, {sum(a.size for a in at_peak if a in cycles_set)} at the peak")
    return {
        "peak": peak, "at": _at(peak_a),
        "reached": sum(1 for c in rises if c == peak),
        "forward_peak": fwd_peak, "forward_peak_at": _at(fwd_peak_a),
        "end_of_forward": end_fwd, "saved_at_end_of_forward": matched,
        "unsaved_at_end_of_forward": _grouped([a for a in at_end if a.saved is None]),
        "held_at_peak": _held(at_peak),
        "categories_at_peak": _by(at_peak, lambda a: a.category.name if a.category is not None else "none"),
        "made_at_peak": _grouped([a for a in at_peak if a.origin["phase"] == "backward"])
        + _grouped([a for a in at_peak if a.origin["phase"] == "recompute"], detail=False),
        "layers": [{"layer": k, "peak": v, "at": _at(a)} for k, (v, a) in sorted(layers.items(), key=_layer_order)],
        "peak_allocated": allocated,
        "left_out": {"gradients_at_end": found, "scratch": most["scratch"], "rng": most["rng"]},
        "cycles_at_peak": sum(a.size for a in at_peak if a in cycles_set),
        "cycles": sum(a.size for a in cycles),
        "checks": checks,
        "allocations": made,
    }


def _metadata(events) -> Dict:
    """{TensorKey: (dtype, sizes)} as the first op that took the tensor saw it (record_shapes)."""
    meta = {}
    for e in events:
        if e.typed[0] == _EventType.TorchOp:
            for i in e.typed[1].inputs:
                for t in (i if isinstance(i, list) else [i]):
                    if isinstance(t, _TensorMetadata):
                        k = TensorKey.from_tensor(t)
                        if k is not None and k not in meta:
                            meta[k] = (str(t.dtype).replace("torch.", ""), tuple(t.sizes))
    return meta


def _kind(a: Alloc) -> str:
    """"rng" (a generator's state), "scratch" (a kernel's buffer) or "activation"."""
    if a.key is None:
        p = a.ev.parent
        if p is not None and _RNG in _name(p):
            return "rng"
        op = _ancestor(a.ev, lambda p: p.typed[0] == _EventType.TorchOp)
        if op is not None and _name(op).startswith("aten::") and a.t1 is not None and a.t1 <= op.end_time_ns:
            return "scratch"
    return "activation"


def _ancestor(ev, test):
    """The innermost event enclosing ``ev`` that passes ``test``, or None."""
    p = ev.parent
    while p is not None and not test(p):
        p = p.parent
    return p


def _forward_modules(events, names, ranges) -> Dict[int, Optional[str]]:
    """{sequence number: module path} of the ops that made autograd nodes (an autograd node has the number of the
    op that made it): the forward's, and a recomputation's in the backward (ops inside a node have none)."""
    out = {}
    lo, hi = ranges[RANGES[1]][0], ranges[RANGES[2]][1]
    for e in events:
        if e.typed[0] == _EventType.TorchOp and lo <= e.start_time_ns <= hi:
            n = e.typed[1].sequence_number
            if n >= 0 and n not in out:  # the innermost nn.Module whose forward call contains e (Python tracer)
                p = _ancestor(e, lambda p: p.typed[0] == _EventType.PyCall and p.typed[1].module is not None
                              and p.typed[1].module.self_ptr in names)
                if p is not None:
                    out[n] = names[p.typed[1].module.self_ptr]
    return out


def _origin(ev, ranges, names, fwd_module) -> Dict:
    """What made ``ev``: its phase (inputs, forward, backward, recompute), op, autograd node (``engine``: made by the
    engine after the node ran) and module (a node's is its forward op's) with its layer."""
    t = ev.start_time_ns  # the phase: the first of RANGES that holds it
    phase = next((n.split(".")[1] for n in RANGES if ranges[n][0] <= t <= ranges[n][1]), "outside")
    op = node = module = None
    engine = recompute = False
    p = ev.parent
    while p is not None:
        kind, name = p.typed[0], _name(p)
        if kind == _EventType.TorchOp:
            if p.typed[1].scope == RecordScope.BACKWARD_FUNCTION or name.startswith(_EVALUATE):
                engine = p.typed[1].scope != RecordScope.BACKWARD_FUNCTION
                node = name[len(_EVALUATE):] if engine else name
                if module is None:  # a recomputation outside any module call (a layer's own code): its layer's
                    module = fwd_module.get(p.typed[1].sequence_number)
                    if recompute and module is not None:
                        module = _LAYER_PATH.match(module).group(0) if _LAYER_PATH.match(module) else module
                break
            if op is None and not name.startswith("memsym."):
                op = _COMPILED.sub("## Call CompiledFxGraph ##", name)  # its hash is not the model's
        elif kind == _EventType.PyCall:
            mod = p.typed[1].module
            if phase == "backward" and (mod is not None or any(f in name for f in _CHECKPOINTS)):
                recompute = True  # a module's forward, or a checkpoint's function, run inside the backward
            # a module the model does not hold (made in a forward: Megatron's torch.nn.Softmax()(x)) is its caller's
            if mod is not None and mod.self_ptr in names:
                module = names[mod.self_ptr]
                break
        p = p.parent
    if recompute:
        phase, node, engine = "recompute", None, False
    if node is not None and engine:
        node += " (engine)"
    return {"phase": phase, "op": op, "node": node, "module": "(none)" if module is None else module or "(model)",
            "layer": _layer(module)}


def _name(ev) -> str:
    """An event's name (a Python call's name can hold bytes that are no UTF-8: shown as such)."""
    try:
        return ev.name
    except UnicodeDecodeError:
        return "(undecodable name)"


def _layer(module: Optional[str]):
    """The decoder layer of a module path (an int), or "mtp", or "outside"."""
    if module is None:
        return "outside"
    layer = layer_of(module)
    if layer is not None:
        return layer
    return "mtp" if sublayer_of(module) == "mtp" else "outside"


def _layer_order(item):
    k = item[0]
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def _at(a: Optional[Alloc]) -> Dict:
    return {} if a is None else dict(a.origin, bytes=a.size)


def _by(allocs, key) -> Dict[str, int]:
    out = Counter()
    for a in allocs:
        out[key(a)] += a.size
    return dict(out.most_common())


def _held(allocs) -> List[Dict]:
    """Bytes held at a moment by what holds them: ``saved`` (made by the forward, held by its saves when it ended),
    ``unsaved`` (made by the forward, held otherwise), ``recomputed`` and ``backward``, per layer."""
    out: Dict = defaultdict(int)
    for a in allocs:
        phase = a.origin["phase"]
        what = ("saved" if a.saved is not None else "unsaved") if phase in ("inputs", "forward") else (
            "recomputed" if phase == "recompute" else "backward")
        layer = a.saved.layer if a.saved is not None else a.origin["layer"]
        out[(what, "outside" if layer is None else layer)] += a.size
    order = {"saved": 0, "unsaved": 1, "recomputed": 2, "backward": 3}
    return [{"what": w, "layer": layer, "bytes": n} for (w, layer), n in
            sorted(out.items(), key=lambda kv: (order[kv[0][0]],) + _layer_order((kv[0][1],))[:2])]


def _grouped(allocs, detail: bool = True) -> List[Dict]:
    """Allocations grouped by (phase, module, node, op, dtype, shape, category), or (``detail=False``) by
    (phase, module) only: bytes and count, largest first."""
    out: Dict = {}
    for a in allocs:
        d = a.describe()
        if not detail:
            d.update(node=None, op=None, dtype="", shape=[], category="")
        k = (d["phase"], d["module"], d["node"] or "", d["op"] or "", d["dtype"], tuple(d["shape"]), d["category"])
        g = out.setdefault(k, {**d, "bytes": 0, "count": 0})
        g["bytes"] += a.size
        g["count"] += 1
    return sorted(out.values(), key=lambda g: (-g["bytes"], g["module"], g["op"] or ""))
