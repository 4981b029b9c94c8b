"""Device memory outside the caching allocator (``--memory device``, issue 46): communication buffers, each a term
whose parts cite the library's size rule.

* **NCCL** (NVIDIA/nccl@5067397c2676d5aed50042fc39e5c8ee96eb0027), per communicator of more than one rank, each
  connection by its transport.  Inside the NVLink domain, P2P (src/transport/p2p.cc p2pRecvSetup/p2pSendSetup): the
  receive side an ``ncclRecvMem`` (MEM_ALIGN 4096 B) with LL (8 lines x 512 threads x NCCL_STEPS 8 x 16 B), LL128
  (120 x 640 x 8 x 8 B) and Simple (NCCL_BUFFSIZE, 4 MiB, src/init.cc computeBuffSizes) in one allocation rounded up
  to CUDA_IPC_MIN (2 MiB, src/include/comm.h); the send side an ``ncclSendMem``, with Simple under P2P read.  Across
  it, NET with GPUDirect RDMA (src/transport/net.cc sendProxyConnect/recvProxyConnect): a ring's receive side LL,
  LL128 and Simple, its send side LL128 and Simple; send/receive and all-to-all share per communicator one send and
  one receive buffer of p2pnChannels x NCCL_SHARED_STEPS 16 x NCCL_P2P_NET_CHUNKSIZE 128 KiB (sharedNetBuffersInit).
  Rings (DP x CP; TP; ETP, megatron/core/parallel_state.py _EXPERT_TENSOR_PARALLEL_GROUP; expert DP, only under
  EP > 1) use P2P read and leave a node of q chained ranks on ceil(C/q) of their C channels; send/receive (PP:
  :func:`pp_peers`; CP under TransformerEngine's default cp_comm_type p2p,
  NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b AttnFuncWithCPAndKVP2P) and all-to-all (EP) use
  P2P write to every peer in the domain: 10 MiB received + 2 MiB sent per peer at 32 channels (NVIDIA/nccl#1685).
  Ranks in Megatron-Core's order (derivations/steptime/placement.py).  Not counted: trees, NVLS and CollNet.
* **DeepEP** (deepseek-ai/DeepEP@79bbb546f6921fbed57f000627a0b92f0d468cf0), the buffer Megatron-Core's fused_a2a
  get_buffer sizes: the largest ``Config.get_nvl_buffer_size_hint`` (csrc/config.hpp) of ``Buffer.get_dispatch_config``
  and ``get_combine_config`` (deep_ep/buffer.py, 20 SMs), hidden bytes h x max(B_a, 2); Buffer's constructor
  (csrc/deep_ep.cpp) adds 8 peers' barrier signals and pointers and a 32 MiB workspace (csrc/kernels/configs.cuh);
  over EP > 8 (internode) the RDMA buffer in NVSHMEM's heap (``Config.get_rdma_buffer_size_hint``).

The CUDA context is taken from the GPU's total (derivations/config/gpus.py CONTEXT); ``C_ch`` channels (default 32,
NVIDIA/nccl#1685); the NVLink domain is --nvlink-domain."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import List, Mapping, Tuple

from derivations import evaluate as ev
from derivations.activations.shape import of_model
from derivations.activations.view import View
from derivations.config.gpus import CONTEXT, CONTEXT_SOURCE
from symbolic.errors import ConfigError

NCCL = "NVIDIA/nccl@5067397c2676d5aed50042fc39e5c8ee96eb0027"
DEEPEP = "deepseek-ai/DeepEP@79bbb546f6921fbed57f000627a0b92f0d468cf0"
IPC_MIN = 2 << 20
MEM_ALIGN = 4096
LL = 8 * 512 * 8 * 16
LL128 = 120 * 640 * 8 * 8
BUFFSIZE = 4 << 20
CHANNELS = 32
SHARED_STEPS = 16
P2P_NET_CHUNK = 1 << 17
#: micro-batches simulated past the in-flight ones: torchtitan's log in pytorch/torchtitan#1789 shows the reserved
#: peak reached by step 10 and unchanged to step 40
STEADY = 10
#: DeepEP deep_ep/buffer.py get_dispatch_config / get_combine_config: EP ranks -> (nvl recv tokens, rdma send, recv)
DISPATCH = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 20, 128), 24: (288, 8, 128),
            32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 12, 128), 128: (560, 12, 128),
            144: (720, 12, 128), 160: (720, 12, 128)}
COMBINE = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 12, 128), 24: (288, 8, 128),
           32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 8, 128), 128: (560, 8, 128),
           144: (720, 8, 128), 160: (720, 8, 128)}
DEEPEP_SMS = 20
NVL_PEERS = 8
TOPK_MAX = SCALES_MAX = 128
SOURCE_META = 8  # csrc/kernels/internode.cu SourceMeta: two ints
TOPK_IDX = 8  # csrc/kernels/configs.cuh: topk_idx_t int64_t (TOPK_IDX_BITS 64)
DEEPEP_WORKSPACE = 32 << 20
DEEPEP_META = NVL_PEERS * (4 + 8 + 8)


def terms():
    """The buffer terms (sympy; their parts name the library's size rule)."""
    # lazy: sympy (estimate imports no sympy)
    import sympy as sp

    from symbolic.term import Part, Term

    def _align(x, a: int):  # x rounded up to a multiple of a
        return a * sp.ceiling(sp.Rational(1, a) * x)
    B, C, h = (sp.Symbol(n, positive=True, integer=True) for n in ("B_nccl", "C_ch", "h"))
    B_a = sp.Symbol("B_a", positive=True)
    p2p = f"{NCCL} src/transport/p2p.cc p2pRecvSetup/p2pSendSetup, src/init.cc computeBuffSizes"
    ring = Term("device.nccl.ring", "one NCCL ring communicator's buffers (per channel: LL + LL128 received, "
                "Simple sent, P2P read)", "bytes", p2p,
                (Part("recv", "receive: ncclRecvMem + LL + LL128, to 2 MiB", (C, _align(MEM_ALIGN + LL + LL128,
                                                                                     IPC_MIN)), provenance=p2p),
                 Part("send", "send: ncclSendMem + Simple (NCCL_BUFFSIZE), to 2 MiB",
                      (C, _align(MEM_ALIGN + B, IPC_MIN)), provenance=p2p)))
    peer = Term("device.nccl.peer", "NCCL buffers per peer of a send/receive or all-to-all communicator (per "
                "channel: LL + LL128 + Simple received, P2P write)", "bytes", p2p + "; NVIDIA/nccl#1685",
                (Part("recv", "receive: ncclRecvMem + LL + LL128 + Simple, to 2 MiB",
                      (C, _align(MEM_ALIGN + LL + LL128 + B, IPC_MIN)), provenance=p2p),
                 Part("send", "send: ncclSendMem, to 2 MiB", (C, _align(MEM_ALIGN, IPC_MIN)), provenance=p2p)))
    hb = h * sp.Max(B_a, 2)
    ep = sp.Symbol("EP", positive=True, integer=True)
    tokens = sp.Symbol("T_nvl", positive=True, integer=True)  # the configs' largest num_max_nvl_chunked_recv_tokens
    ch, nvl = DEEPEP_SMS // 2, sp.Min(ep, NVL_PEERS)
    rdma_ranks = sp.Max(sp.floor(ep / NVL_PEERS), 1)
    per = ch * nvl * tokens
    rule = f"{DEEPEP} csrc/config.hpp Config::get_nvl_buffer_size_hint"
    deepep = Term("device.deepep", "DeepEP's NVLink buffer (the largest size hint of its dispatch and combine "
                  "configs), its metadata and workspace", "bytes", rule,
                  (Part("nvl", "num_channels x NVL ranks x (tokens x (hidden bytes + source meta + top-k indices "
                        "and weights + scales)) + the channels' counters, to 128 B",
                        (_align(ch * nvl * (2 * rdma_ranks + 3) * 4 + per * (hb + SOURCE_META) + per * TOPK_MAX
                                * (TOPK_IDX + 4) + per * SCALES_MAX * 4, 128),), provenance=rule),
                   Part("meta", "barrier signals and buffer pointers of 8 peers", (DEEPEP_META,),
                        provenance=f"{DEEPEP} csrc/deep_ep.cpp Buffer::Buffer"),
                   Part("workspace", "NUM_WORKSPACE_BYTES, 32 MiB", (DEEPEP_WORKSPACE,),
                        provenance=f"{DEEPEP} csrc/kernels/configs.cuh")))
    r_tokens = sp.Symbol("T_rdma", positive=True, integer=True)  # the configs' largest aligned RDMA receive tokens
    per_r = ch * rdma_ranks * r_tokens
    r_rule = f"{DEEPEP} csrc/config.hpp Config::get_rdma_buffer_size_hint"
    rdma = Term("device.deepep.rdma", "DeepEP's RDMA buffer across nodes (EP > 8; NVSHMEM's symmetric heap, outside "
                "PyTorch's allocator): the largest size hint of its dispatch and combine configs", "bytes", r_rule,
                (Part("rdma", "num_channels x RDMA ranks x (the counters, and twice (send and receive) tokens x "
                      "(hidden bytes + source meta + top-k indices and weights + scales + an int4)), to 128 B",
                      (_align(ch * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * 4 + 2 * per_r
                              * (hb + SOURCE_META + TOPK_MAX * (TOPK_IDX + 4) + SCALES_MAX * 4 + 16), 128),),
                      provenance=r_rule),))
    context = Term("device.context", "the CUDA context (driver, lazily loaded kernels), taken from the GPU's total: "
                   "the usable capacity (derivations/config/gpus.py)", "bytes", CONTEXT_SOURCE,
                   (Part("context", "CUDA context, about 400 MB", (CONTEXT,)),))
    net = f"{NCCL} src/transport/net.cc sendProxyConnect/recvProxyConnect, GPUDirect RDMA"
    ring_net = Term("device.nccl.ring.net", "one NCCL ring channel entering and leaving the node over the network "
                    "(NET, GPUDirect RDMA)", "bytes", net,
                    (Part("recv", "receive: LL + LL128 + Simple, to 2 MiB", (_align(LL + LL128 + B, IPC_MIN),),
                          provenance=net),
                     Part("send", "send: LL128 + Simple (LL in host memory), to 2 MiB", (_align(LL128 + B, IPC_MIN),),
                          provenance=net)))
    shared = f"{NCCL} src/transport/net.cc sharedNetBuffersInit, src/init.cc computeBuffSizes (P2P_NET_CHUNKSIZE)"
    p2p_net = Term("device.nccl.p2p.net", "one NCCL send/receive or all-to-all communicator's shared buffers for its "
                   "peers across the network (GPUDirect RDMA)", "bytes", shared,
                   (Part("shared", "a send and a receive buffer of p2pnChannels x NCCL_SHARED_STEPS x 128 KiB",
                         (2, C, SHARED_STEPS, sp.Min(P2P_NET_CHUNK, B / 8)), provenance=shared),))
    return ring, peer, deepep, rdma, context, ring_net, p2p_net


@dataclass(frozen=True)
class Buffer:
    """One line of the device memory outside the allocator: its term, what it is, its bytes."""

    term: str
    what: str
    bytes: int


def _value(term, values: Mapping) -> int:
    # lazy: sympy (estimate imports no sympy)
    import sympy as sp
    names = {s.name: s for s in term.expr.free_symbols}
    return int(sp.Integer(term.expr.xreplace({names[k]: v for k, v in values.items() if k in names})))


def deepep_tokens(ep: int) -> int:
    """The largest num_max_nvl_chunked_recv_tokens of DeepEP's dispatch and combine configs for ``ep`` ranks."""
    if ep not in DISPATCH:
        raise ConfigError("dispatcher", f"DeepEP has no config for {ep} EP ranks (deep_ep/buffer.py: "
                                        f"{', '.join(map(str, DISPATCH))})")
    return max(DISPATCH[ep][0], COMBINE[ep][0])


def deepep_rdma_tokens(ep: int) -> int:
    """The largest num_max_rdma_chunked_recv_tokens of DeepEP's two configs for ``ep`` ranks, each aligned up to its
    num_max_rdma_chunked_send_tokens (csrc/config.hpp Config::Config)."""
    deepep_tokens(ep)  # (an unknown EP refused)
    return max(-(-recv // send) * send for _, send, recv in (DISPATCH[ep], COMBINE[ep]))


def _on_node(n, stride: int, domain: int) -> int:
    """Ranks of a group of ``n`` ranks ``stride`` apart inside one NVLink domain of ``domain`` GPUs."""
    return int(min(n, max(domain // stride, 1)))


def _n(k: int, what: str) -> str:
    return f"{k} {what}" + ("" if k == 1 else "s")


def pp_peers(stride: int, pp: int, stage: int, domain: int, wrap: bool) -> Tuple[int, int]:
    """(inside, across) the NVLink domain: the pipeline neighbours a rank of ``stage`` sends to and receives from,
    ranks ``stride`` = TP CP DP apart (Megatron-Core's order), the worst rank of the stage (the most bytes: a local
    peer's buffers outweigh the network's shared ones).  Megatron-Core's non-interleaved schedules
    (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving: recv_forward /
    send_backward skip the first stage, send_forward / recv_backward the last) connect the first and last stages to
    one neighbour; the interleaved schedule (``wrap``) sends the last stage's chunk to the first stage's next chunk
    (p2p_communication.py: the previous and next ranks modulo PP), so every stage has two (one when PP is 2)."""
    prev = stage > 0 or wrap
    nxt = stage < pp - 1 or wrap
    best, world = (0, 0), pp * stride
    for r in range(stage * stride, stage * stride + min(stride, domain)):  # (which node: periodic in r by domain)
        peers = {(r + d * stride) % world for d, on in ((-1, prev), (1, nxt)) if on}
        local = sum(q // domain == r // domain for q in peers)
        best = max(best, (local, len(peers) - local))
    return best


def buffers(layout, hidden: int, act_bytes, dispatcher: str = "alltoall", buffsize: int = BUFFSIZE,
            channels: int = CHANNELS, domain: int = 8, stage: int = 0, wrap: bool = False) -> List[Buffer]:
    """The device's buffers outside the allocator under ``layout`` on NVLink domains of ``domain`` GPUs: a ring
    communicator per group of more than one rank (DP x CP, TP, ETP, expert DP under EP > 1), CP's and PP's send/receive
    to the neighbours (PP's of ``stage``, :func:`pp_peers`; ``wrap``: the interleaved schedule's), EP's all-to-all (or
    DeepEP's buffer), each connection inside the domain by P2P, across it by NET."""
    ring, peer, deepep, rdma, _, ring_net, p2p_net = terms()
    v = {"B_nccl": buffsize, "C_ch": 1}
    per_ring, per_net, per_peer = _value(ring, v), _value(ring_net, v), _value(peer, v)
    shared = _value(p2p_net, {"B_nccl": buffsize, "C_ch": channels})
    out = []
    tp, cp, dp, ep, etp = layout.tp, layout.cp, layout.dp, layout.ep, layout.etp
    # the gradients reduce over DP x CP (Megatron-Core get_data_parallel_group(with_context_parallel=True)); the
    # experts' linears over ETP (parallel_state.py _EXPERT_TENSOR_PARALLEL_GROUP, its own communicator)
    groups = (("DP x CP" if cp > 1 else "DP", dp * cp, tp), ("TP", tp, 1), ("ETP", etp, 1),
              ("EDP", Fraction(layout.edp) if ep > 1 else 1, ep * etp))
    for name, n, stride in groups:
        if n > 1:
            q = _on_node(n, stride, domain)
            net = 0 if q == n else -(-channels // q)
            where = f", {net} across nodes" if net else ""
            out.append(Buffer(ring_net.id if net else ring.id, f"NCCL {name} ring ({channels} channels{where})",
                              (channels - net) * per_ring + net * per_net))

    def p2p(name, local, remote, what="send/receive"):
        if local:
            out.append(Buffer(peer.id, f"NCCL {name} {what}, {_n(local, 'peer')}", local * channels * per_peer))
        if remote:
            out.append(Buffer(p2p_net.id, f"NCCL {name} {what}, {_n(remote, 'peer')} across nodes", shared))
    if cp > 1:  # TE's default cp_comm_type p2p: KV blocks to the next CP rank, from the previous (a ring of P2P)
        p2p("CP", *max(pp_peers(tp, cp, i, domain, True) for i in range(cp)))
    if layout.pp > 1:
        p2p("PP", *pp_peers(tp * cp * dp, layout.pp, stage, domain, wrap))
    if ep > 1:
        if dispatcher == "deepep":
            out.append(Buffer(deepep.id, f"DeepEP buffer, EP {ep}", _value(
                deepep, {"EP": ep, "T_nvl": deepep_tokens(ep), "h": hidden, "B_a": act_bytes})))
            if ep > NVL_PEERS:
                out.append(Buffer(rdma.id, f"DeepEP RDMA buffer, EP {ep}", _value(
                    rdma, {"EP": ep, "T_rdma": deepep_rdma_tokens(ep), "h": hidden, "B_a": act_bytes})))
        else:
            local = _on_node(ep, etp, domain) - 1
            p2p("EP", local, ep - 1 - local, "all-to-all")
    return out


def _sampling_spread(v: Mapping) -> Fraction:
    """sqrt(3) sigma / mu (the half-width of a uniform law of variance sigma^2) of the token-copies one EP rank
    receives in a layer when each token picks its N_r experts uniformly among N (the balanced router the terms
    assume): per token the copies landing on the rank's N/EP experts are hypergeometric (mean N_r/EP, variance
    N_r (1/EP)(1 - 1/EP)(N - N_r)/(N - 1)), summed over the b s EP / (SP CP) tokens of the EP group; to 10^-6 of a
    token-copy."""
    n, k, ep = v.get("N", 0), v.get("N_r", 0), v.get("EP", 1)
    if ep <= 1 or n <= 1 or not k:
        return Fraction(0)
    tokens = Fraction(v["b"] * v["s"] * ep, v.get("SP", 1) * v.get("CP", 1))
    var = tokens * k * Fraction(1, ep) * (1 - Fraction(1, ep)) * Fraction(n - k, n - 1)
    return Fraction(math.isqrt(int(3 * var * 10 ** 12)), 10 ** 6) / (tokens * Fraction(k, ep))


def _layer_tensors(est) -> List[Tuple[object, List[Tuple[str, Fraction, Fraction]]]]:
    """[(layer, [(tensor, bytes, bytes per unit of F)])] of one micro-batch: each layer's kept tensors
    (evaluate.tensor_values of its attention and its FFN kind, what the layer's term holds beyond them one more),
    what is kept outside the layers last.  The bytes per unit of F (the routed tensors': E_token = F b s N_r / N) are
    what routing changes."""
    view, shape, v = View.of(est.training), of_model(est.model), est.values
    moved = dict(v, F=v.get("F", 1) + 1, E_token=v.get("E_token", 0) * (v.get("F", 1) + 1) / v.get("F", 1))
    per_kind = {k: [(f"{k}.{key}", Fraction(x), Fraction(ev.tensor_values(view, shape, moved, k)[key]) - x)
                    for key, x in ev.tensor_values(view, shape, v, k).items() if x]
                for k in {"mla"} | {kind for _, kind, _ in est.by_layer}}
    out = []
    for i, kind, x in est.by_layer:
        parts = per_kind["mla"] + per_kind[kind]
        rest = Fraction(x) - sum(b for _, b, _ in parts)
        out.append((i, parts + [("rest", rest, Fraction(0))] if rest >= 0 else [("layer", Fraction(x), Fraction(0))]))
    return out + [("out", [("out", Fraction(est.outside_layers), Fraction(0))])]


def _z(m: int, n: int) -> List[Fraction]:
    """The routing deviation of each of n layers in micro-batch m, in units of the half-width: n evenly spaced points
    on [-1, 1] dealt to the layers in the order of ``random.Random(m).shuffle`` (independent draws of a uniform law,
    every layer of a micro-batch a different count; deterministic)."""
    points = [Fraction(2 * j - (n - 1), max(n - 1, 1)) for j in range(n)]
    random.Random(m).shuffle(points)
    return points


def reserved_events(est) -> List[Tuple[str, object, int]]:
    """The step as allocations and frees from an estimate's terms (derivations/analyses/allocator.py's input): the
    model states, runtime buffers and CUDA graphs' static buffers once, then as many forwards as reach the terms'
    in-flight activations, each layer's kept tensors one block each (:func:`_layer_tensors`) and what is kept outside
    the layers after them, held up to the terms' activations at the end of the forward (``activations``: a tensor that
    would pass them first starts the oldest micro-batch's backward; what the terms hold beyond whole tensors, such as
    an interleaved head chunk, one block kept to the end; what they do not hold, such as offloaded tensors or what
    CUDA graphs save in their pool, never allocated); a backward takes the layers in reverse, each allocating the
    step's transient (the step excess, the largest layer's; under CUDA graphs the training step's own,
    ``step_replay``), freeing the layer's tensors, then the transient.

    Routing changes from micro-batch to micro-batch (the ``STEADY`` micro-batches past the in-flight ones, as long
    as the reserved peak takes to settle): layer i's routed tensors in micro-batch m hold mu (1 + z a) token-copies,
    z = :func:`_z` and a = :func:`_sampling_spread` (a uniform law of the balanced router's mean and variance), so
    the allocated peak is the terms' step total within a of the routed bytes, each block rounded up to a byte.  A
    learned skew is the terms' F (--imbalance), not simulated."""
    return events(est.bytes, _layer_tensors(est), _sampling_spread(est.values) * est.values.get("F", 1))


def events(b: Mapping, layers, spread=0) -> List[Tuple[str, object, int]]:
    """:func:`reserved_events` of the terms' bytes ``b``, one micro-batch's ``layers`` (:func:`_layer_tensors`) and
    the routed bytes' half-width ``spread``."""
    up = lambda x: int(-(-Fraction(x) // 1))  # noqa: E731
    out = [("malloc", k, up(b[k])) for k in ("weights", "gradients", "optimizer", "runtime", "graphs") if b.get(k)]
    target, step = up(b.get("activations", 0)), up(b.get("step_replay", b.get("step", 0)))
    held, queue, topped = 0, [], False
    per = sum(up(x) for _, ts in layers for _, x, _ in ts)  # one micro-batch: the forwards that reach the target, +1
    microbatches = STEADY + 1 + (target // per if per else 0)

    def backward():
        nonlocal held
        m, keys = queue.pop(0)
        for layer in reversed(list(dict.fromkeys(k[1] for k, _ in keys))):
            if step:
                out.append(("malloc", (m, layer, "step"), step))
            out.extend(("free", k, 0) for k, _ in reversed(keys) if k[1] == layer)
            if step:
                out.append(("free", (m, layer, "step"), 0))
        held -= sum(x for _, x in keys)

    for m in range(microbatches):
        queue.append((m, []))
        for (i, tensors), z in zip(layers, _z(m, len(layers))):
            for name, x, routed in tensors:
                x = up(x + z * spread * routed)
                if held + x > target and len(queue) > 1:
                    if not topped and target > held:
                        out.append(("malloc", "rest", target - held))
                        held, topped = target, True
                    backward()
                x = x if len(queue) > 1 else min(x, target - held)
                if x > 0:
                    out.append(("malloc", (m, i, name), x))
                    queue[-1][1].append(((m, i, name), x))
                    held += x
    while queue:
        backward()
    return out
