"""Real dimensions without memory: ``memsym trace --fake`` (torch's FakeTensorMode) and balanced routing.

Fake tensors have shape, dtype, strides and a storage of their size (what the Recorder counts) but no data;
what routing needs of the data comes from :class:`Routing`, a dispatch mode above the fake one: every ``aten.topk``
of floating scores picks columns ``(r k + j) mod n`` for row ``r`` (each expert gets ``b s N_r / N`` token-copies),
and a tensor computed from known values only (top-k indices, input ids, fills) carries a real *shadow* that answers
the data-dependent operations.  A real ``balanced`` trace replaces only the top-k.  A fake trace runs no backward.
"""
from __future__ import annotations

import contextlib
import math

#: The most elements a shadow (a real tensor computed beside a fake one) may have.
SHADOW_LIMIT = 1 << 24


def balanced_indices(rows: int, n: int, k: int):
    """``[rows, k]`` int64: row ``r`` picks columns ``(r k + j) mod n`` (``j < k``)."""
    import torch
    r = torch.arange(rows, dtype=torch.int64).unsqueeze(1)
    return (r * k + torch.arange(k, dtype=torch.int64).unsqueeze(0)) % n


def describe(mode) -> str:
    """How a trace routed tokens (its info's ``routing``): the router's, or :class:`Routing`'s."""
    if getattr(mode, "topk_calls", None) is None:
        return "the router's (real scores)"
    return f"balanced: {mode.topk_calls} top-k replaced (memsym/trace/fake.py)"


def modes(fake: bool, balanced: bool):
    """(FakeTensorMode or None, the routing context: :class:`Routing` for a fake or balanced run) of a trace."""
    fake_mode = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode
        fake_mode = FakeTensorMode()
    return fake_mode, routing_mode(fake_mode) if fake or balanced else contextlib.nullcontext()


def routing_mode(fake_mode=None):
    """A :class:`Routing` dispatch mode (the class needs torch, so it is made here)."""
    import torch
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                               FakeTensor, unset_fake_temporarily)
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten, tree_map_only, tree_unflatten
    from torch.utils.weak import WeakIdKeyDictionary

    aten = torch.ops.aten
    #: Operators whose values follow from their inputs' metadata alone.
    filled = {aten.zeros_like.default, aten.ones_like.default, aten.full_like.default,
              aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
              aten.zero_.default, aten.fill_.Scalar}
    #: Factories of uninitialised memory: no value to know (the parameters' before their init).
    uninitialised = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                     aten.new_empty.default, aten.new_empty_strided.default}

    class Routing(TorchDispatchMode):
        """Balanced top-k; under ``fake_mode``, real shadows of the values routing needs."""

        def __init__(self, fake):
            super().__init__()
            self.fake = fake
            self.shadow = WeakIdKeyDictionary()
            self.stale = {}  # fake storages written without their shadow: cdata -> storage (held)
            self.topk_calls = 0

        # ---------------------------------------------------------------- helpers
        def known(self, t) -> bool:
            if not isinstance(t, FakeTensor):
                return True
            return t in self.shadow and t.untyped_storage()._cdata not in self.stale

        def as_fake(self, t):
            if isinstance(t, FakeTensor) or not isinstance(t, torch.Tensor):
                return t
            f = self.fake.from_tensor(t)
            self.shadow[f] = t
            return f

        def as_real(self, t, placeholder: str = ""):
            """``t``'s value: itself, its shadow, or a placeholder (``like``: its strides; ``zeros``)."""
            if not isinstance(t, FakeTensor):
                return t
            if self.known(t):
                return self.shadow[t]
            if placeholder == "like":
                return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
            if placeholder == "zeros":
                return torch.zeros((), dtype=t.dtype).expand(t.shape)
            raise KeyError(t)

        def attach(self, fake_out, real_out):
            fl, _ = tree_flatten(fake_out)
            rl, _ = tree_flatten(real_out)
            for f, r in zip(fl, rl):
                if isinstance(f, FakeTensor) and isinstance(r, torch.Tensor):
                    self.shadow[f] = r

        def _stale(self, func, args, kwargs):
            """Mark every tensor ``func`` writes as stale (its shadow no longer its value)."""
            schema = func._schema
            if not schema.is_mutable:
                return
            for i, a in enumerate(schema.arguments):
                if a.alias_info is None or not a.alias_info.is_write:
                    continue
                v = args[i] if i < len(args) else kwargs.get(a.name)
                for t in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(t, FakeTensor):
                        st = t.untyped_storage()
                        self.stale[st._cdata] = st

        def topk(self, args, kwargs):
            x, k = args[0], args[1]
            dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
            dim = dim % x.dim()
            n = x.shape[dim]
            moved = [m for i, m in enumerate(x.shape) if i != dim]
            rows = math.prod(moved)
            with unset_fake_temporarily():  # real indices (their shadow, under fake tensors)
                idx = balanced_indices(rows, n, k).reshape(*moved, k).movedim(-1, dim).contiguous()
                if self.fake is not None:
                    idx = self.as_fake(idx)
            self.topk_calls += 1
            return torch.gather(x, dim, idx), idx

        # ---------------------------------------------------------------- dispatch
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.topk.default and args[0].is_floating_point():
                return self.topk(args, kwargs)
            if self.fake is None:
                return func(*args, **kwargs)
            flat, _ = tree_flatten((args, kwargs))
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            known = func not in uninitialised and all(self.known(t) for t in tensors)
            fill = func in filled
            with unset_fake_temporarily():
                fargs, fkwargs = tree_map_only(torch.Tensor, self.as_fake, (args, kwargs))
            try:
                out = func(*fargs, **fkwargs)
            except (DynamicOutputShapeException, DataDependentOutputException):
                return self.data_dependent(func, args, kwargs, known)
            if not (known or fill):
                self._stale(func, fargs, fkwargs)
                return out
            size = sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            if size > SHADOW_LIMIT:
                self._stale(func, fargs, fkwargs)
                return out
            with unset_fake_temporarily():
                rargs, rkwargs = tree_map_only(torch.Tensor, lambda t: self.as_real(t, "like" if fill else ""),
                                               (args, kwargs))
                real = func(*rargs, **rkwargs)
            self.attach(out, real)
            return out

        def data_dependent(self, func, args, kwargs, known):
            """An operator whose output needs data: computed on the shadows (else on zeros: no shadow then)."""
            if not known and func is aten._local_scalar_dense.default:
                raise RuntimeError(f"memsym trace --fake: {func} needs the value of a tensor routing "
                                   f"does not determine")
            with unset_fake_temporarily():
                rargs, rkwargs = tree_map_only(torch.Tensor, lambda t: self.as_real(t, "zeros"), (args, kwargs))
                real = func(*rargs, **rkwargs)
                fl, spec = tree_flatten(real)
                outs = []
                for r in fl:
                    if isinstance(r, torch.Tensor):
                        f = self.fake.from_tensor(r)
                        if known:
                            self.shadow[f] = r
                        outs.append(f)
                    else:
                        outs.append(r)
            return tree_unflatten(outs, spec)

    return Routing(fake_mode)
