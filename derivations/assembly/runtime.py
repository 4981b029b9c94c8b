"""Runtime buffers a training framework allocates on every device (extension; ``--runtime-buffers``), counted by
``torch.cuda.memory_stats()["allocated_bytes.all.peak"]`` for the whole run (Megatron-Core with Transformer Engine):
TE's GEMM workspace (transformer_engine/pytorch/cpp_extensions/gemm.py get_cublas_workspace, lru_cache per device:
get_cublas_workspace_size_bytes(), 32 MiB + 1 KiB on Hopper, "32 MiB for NVFP4 GEMM, plus 1024 B for alignment"), one
more per cuBLAS stream for general_grouped_gemm (tex.get_num_cublas_streams(), 4; --moe-grouped-gemm), and PyTorch's
cuBLAS workspace per (handle, stream) (CublasHandlePool.cpp getNewWorkspace: 32 MiB on Hopper,
CUBLAS_WORKSPACE_CONFIG :4096:8): 5 (2^25 + 2^10) + 2^25 bytes per device.  NCCL's buffers are outside the caching
allocator (Sec. 6's M_buf)."""
from __future__ import annotations

from functools import lru_cache

TE_GEMM = "Transformer Engine 2.x transformer_engine/pytorch/cpp_extensions/gemm.py: get_cublas_workspace"
TORCH_CUBLAS = "PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp: getNewWorkspace (CUBLAS_WORKSPACE_CONFIG :4096:8)"
TE_WORKSPACE = 2 ** 25 + 2 ** 10
TE_GROUPED_STREAMS = 4
TORCH_WORKSPACE = 2 ** 25


def buffers_id(value: str) -> str:
    """The term id of ``--runtime-buffers value``."""
    if value != "te":
        raise ValueError(f"no runtime buffers term for {value!r}")
    return f"runtime.buffers.{value}"


def buffers_bytes(value: str) -> int:
    """The bytes of ``--runtime-buffers value`` on every device (the parts of :func:`buffers_term`)."""
    buffers_id(value)
    return TE_WORKSPACE + TE_GROUPED_STREAMS * TE_WORKSPACE + TORCH_WORKSPACE


@lru_cache(maxsize=None)
def buffers_term(value: str):
    """``runtime.buffers.<value>`` (a Term, in bytes) of ``--runtime-buffers``."""
    # lazy: sympy (estimate/params import no sympy)
    from symbolic.term import Part, Term
    return Term(buffers_id(value), "runtime buffers on every device: the cuBLAS workspaces of Transformer "
                                      "Engine and PyTorch (Hopper)", "bytes",
                "extension: " + TE_GEMM + "; " + TORCH_CUBLAS,
                (Part("te_gemm", "TE GEMM workspace, 32 MiB + 1 KiB", (TE_WORKSPACE,), provenance=TE_GEMM),
                 Part("te_grouped", "TE grouped-GEMM workspaces, one per cuBLAS stream (4)",
                      (TE_GROUPED_STREAMS, TE_WORKSPACE), provenance=TE_GEMM),
                 Part("torch_cublas", "PyTorch cuBLAS workspace, 32 MiB", (TORCH_WORKSPACE,),
                      provenance=TORCH_CUBLAS)))
