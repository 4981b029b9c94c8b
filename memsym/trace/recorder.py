"""The tensors autograd saves for backward (``saved_tensors_hooks``) and what is held of them when the forward ends.

Each storage counts once, whole, identified by the storage object (``data_ptr()`` is reused after ``resize_(0)``);
parameters and buffers are excluded.  A save counts while its node lives: autograd gets a holder of the *detached*
tensor (the tensor itself would keep its own ``grad_fn`` alive), weakly referenced here.  A storage belongs to the
layer whose live saves hold it; held by several, by the ``stage`` modules' outputs or outside, it counts outside;
saves whose holders all died are :meth:`Recorder.discarded`.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")
#: Megatron-Core's MTP block (``mtp.layers.K``): its modules are not decoder layers, so what they save
#: counts outside the layers (sublayer "mtp")
_MTP = re.compile(r"(?:^|\.)mtp\.")


def layer_of(path: str) -> Optional[int]:
    """The decoder layer index of a module path, or None (outside the layers, the MTP block included)."""
    if _MTP.search(path):
        return None
    m = _LAYER.search(path)
    return int(m.group(1)) if m else None


@dataclass
class Saved:
    """One storage saved for backward."""

    key: int
    nbytes: int
    dtype: str
    shape: Tuple[int, ...]
    module: str  # the innermost module running when it was first saved
    node: str  # the autograd node (grad_fn) of the saving operation, when known
    layer: Optional[int]  # None: outside the layers
    sublayer: str
    sites: List[Tuple[str, str]] = field(default_factory=list)  # every (module, node) that saved it
    holders: list = field(default_factory=list)  # (weak reference to the holder autograd keeps, layer) per save
    alive: bool = True  # some save still held at the end of the forward (set by Recorder.finalize)

    def live_layers(self) -> set:
        """The layers (None: outside) of the saves whose holder autograd keeps now."""
        return {layer for ref, layer in self.holders if ref() is not None}

    def to_json(self):
        return {"bytes": self.nbytes, "dtype": self.dtype, "shape": list(self.shape), "module": self.module,
                "node": self.node, "layer": self.layer, "sublayer": self.sublayer,
                "saved_by": len(self.sites), "held": self.alive}


class _Held:
    """What autograd keeps for one save: the detached tensor, weakly referenced to tell whether its node lives."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


def _unpack(held):
    return held.tensor if isinstance(held, _Held) else held


def sublayer_of(path: str) -> str:
    """'attention' | 'ffn' | 'outside' from a module path (``model.layers.1.self_attn.q_a_proj``)."""
    if _MTP.search(path):
        return "mtp"
    m = _LAYER.search(path)
    if not m:
        return "outside"
    rest = path[m.end():]
    if rest.startswith(("self_attn", "input_layernorm", "self_attention", "input_layernorm")):
        return "attention"
    if rest.startswith(("mlp", "post_attention_layernorm", "pre_mlp_layernorm")):
        return "ffn"
    return "layer"


class Recorder:
    """A context manager: module stack (forward hooks) + saved-tensor hooks."""

    def __init__(self, model: torch.nn.Module, stage=(), hold: bool = True):
        self.model = model
        self.stage = tuple(stage)  # modules whose outputs belong to the stage (counted outside the layers)
        # their output storages, held so their ids are not reused (``hold=False``: weakly, see ``keep``)
        self.stage_keys: Dict[int, object] = {}
        self.stack: List[str] = []
        self.saved: Dict[int, Saved] = {}
        # the storages, held so their ids are not reused; ``hold=False`` (a profiled step) holds them weakly and
        # a dead storage's record gives way to a new one at its address (:meth:`_retire`)
        self.keep: Dict[int, object] = {}
        self.hold = hold
        self._retired = 0
        self.excluded = {p.untyped_storage()._cdata for p in model.parameters()}
        self.excluded |= {b.untyped_storage()._cdata for b in model.buffers()}
        self.handles = []
        self.names = {m: n for n, m in model.named_modules()}

    # module stack
    def _pre(self, mod, args):
        self.stack.append(self.names.get(mod, "?"))

    def _post(self, mod, args, out):
        if self.stack:
            self.stack.pop()

    def _stage_output(self, mod, args, out):
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta":
                st = t.untyped_storage()
                self.stage_keys[st._cdata] = st if self.hold else weakref.ref(st)

    def _pack(self, t):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type == "meta":
            return t
        st = t.untyped_storage()
        key = st._cdata
        if key in self.excluded:
            return t
        path = self.stack[-1] if self.stack else ""
        layer = layer_of(path)
        node = ""
        rec = self.saved.get(key)
        if rec is not None and not self.hold and self.keep[key]() is None:
            rec = self._retire(key)
        if rec is None:
            self.keep[key] = st if self.hold else weakref.ref(st)
            rec = self.saved[key] = Saved(key, st.nbytes(), str(t.dtype).replace("torch.", ""), tuple(t.shape),
                                          path, node, layer, sublayer_of(path))
        rec.sites.append((path, node))
        held = _Held(t.detach())
        rec.holders.append((weakref.ref(held), layer))
        return held

    def __enter__(self):
        for mod in self.model.modules():
            self.handles.append(mod.register_forward_pre_hook(self._pre))
            self.handles.append(mod.register_forward_hook(self._post, always_call=True))
        for mod in self.stage:
            self.handles.append(mod.register_forward_hook(self._stage_output))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        for h in self.handles:
            h.remove()
        self.finalize()
        return False

    def _retire(self, key):
        """``hold=False``: the storage at ``key`` died; its record moves to a (negative) key no storage has."""
        self._retired += 1
        self.saved[-self._retired] = self.saved.pop(key)
        self.keep[-self._retired] = self.keep.pop(key)
        return None

    def storage(self, key):
        """The storage recorded at ``key``, or None (``hold=False``: it died)."""
        st = self.keep[key]
        return st() if isinstance(st, weakref.ref) else st

    def finalize(self):
        """Bytes of each storage as the forward leaves it (Megatron's CheckpointWithoutOutput ``resize_(0)``s some),
        and its layer from the saves still held: one layer's, or ``shared`` (outside) when several hold it."""
        for key, rec in self.saved.items():
            st = self.storage(key)
            if st is not None:  # else (hold=False) it died: the bytes it had when saved
                rec.nbytes = st.nbytes()
            live = rec.live_layers()
            rec.alive = bool(live)
            if len(live) == 1:
                rec.layer = next(iter(live))
                rec.sublayer = sublayer_of(next(m for (m, _), (ref, _l) in zip(rec.sites, rec.holders)
                                                if ref() is not None))
            elif len(live) > 1:  # held by saves of more than one layer (or also outside): outside
                rec.layer, rec.sublayer = None, "shared"
            if live and key in self.stage_keys:  # a stage-wide input of the layers: outside, however many hold it
                rec.layer, rec.sublayer = None, "shared"

    def push(self, path: str):
        """Attribute what is saved until :meth:`pop` to ``path`` (a checkpoint run for one layer)."""
        self.stack.append(path)

    def pop(self):
        self.stack.pop()

    # results
    def held(self) -> List[Saved]:
        """The storages some live save still holds at the end of the forward."""
        return [r for r in self.saved.values() if r.alive]

    def alive_check(self) -> str:
        """How many recorded storages a live autograd node still holds at the end of the forward."""
        return f"{len(self.saved)} storages recorded, {len(self.held())} held at the end of the forward"

    def discarded(self) -> List[Saved]:
        """The storages saved only by nodes freed during the forward (every holder gone)."""
        return [r for r in self.saved.values() if not r.alive]

    def by_layer(self, n_layers: int) -> Tuple[List[int], int]:
        """Bytes held at the end of the forward per layer, and outside the layers."""
        per = [0] * n_layers
        outside = 0
        for r in self.held():
            if r.layer is None:
                outside += r.nbytes
            else:
                per[r.layer] += r.nbytes
        return per, outside
