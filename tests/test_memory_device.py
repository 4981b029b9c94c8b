"""--memory (issue 46): PyTorch's caching allocator simulated, and the buffers outside it against their libraries'
own numbers.  Every expectation is written out from the library's source or a published log, not computed by
the code under test."""
from __future__ import annotations

import json
import math
import os
from fractions import Fraction

import pytest

from derivations.analyses import allocator as al
from derivations.assembly import overheads_device as od
from symbolic.errors import ConfigError
from clirun import run

MiB = 1 << 20


def test_small_request_packs_a_2mib_segment():
    # CUDACachingAllocator.cpp: sizes round to 512 B; "Small requests are packed into 2MB buffers"
    a = al.Allocator()
    a.malloc(1)
    a.malloc(1000)
    assert (a.allocated, a.reserved) == (512 + 1024, 2 * MiB)


def test_requests_between_1_and_10_mib_split_a_20_mib_segment():
    # "requests between 1MB and 10MB will allocate and split a 20MB block"
    a = al.Allocator()
    a.malloc(3 * MiB)
    a.malloc(5 * MiB)
    assert (a.allocated, a.reserved) == (8 * MiB, 20 * MiB)


def test_large_request_rounds_to_2_mib_and_is_not_split_within_1_mib():
    a = al.Allocator()
    i = a.malloc(11 * MiB + 1)
    assert a.reserved == 12 * MiB and a.allocated == 12 * MiB  # the 1 MiB - 512 B rest is not split (<= kSmallSize)
    a.free(i)
    a.malloc(11 * MiB)  # the cached segment serves it: nothing new reserved
    assert a.reserved == 12 * MiB


def test_max_split_size_keeps_oversize_blocks_for_large_requests():
    # get_free_block: "Do not return an oversized block for a large request"
    big = 600 * MiB
    for conf, reserved in (("", big), ("max_split_size_mb:512", big + 20 * MiB)):
        a = al.Allocator(al.settings(conf))
        a.free(a.malloc(big))
        a.malloc(4 * MiB)
        assert a.reserved == reserved, conf


def test_expandable_segments_grow_in_20_mib_pages():
    plain, grown = al.Allocator(), al.Allocator(al.settings("expandable_segments:True"))
    for a in (plain, grown):
        for _ in range(3):
            a.malloc(15 * MiB)  # 16 MiB segments each without; 45 MiB in one segment of 20 MiB pages with
    assert (plain.reserved, grown.reserved) == (48 * MiB, 60 * MiB)
    assert grown.allocated == 45 * MiB


def test_out_of_memory_releases_cached_segments_and_retries():
    a = al.Allocator(capacity=100 * MiB)
    a.free(a.malloc(60 * MiB))
    a.malloc(80 * MiB)  # 60 + 80 > 100: the free 60 MiB segment is released first
    assert a.reserved == 80 * MiB
    with pytest.raises(al.OutOfMemory):
        a.malloc(30 * MiB)


def test_garbage_collection_threshold_releases_before_growing():
    a = al.Allocator(al.settings("garbage_collection_threshold:0.5"), capacity=100 * MiB)
    a.free(a.malloc(60 * MiB))
    a.malloc(62 * MiB)  # reserved 60 MiB > 0.5 x 100 MiB: the free segment goes before the new one is made
    assert a.reserved == 62 * MiB


@pytest.mark.parametrize("conf", ["max_split_size_mb:x", "expandable_segments:maybe",
                                  "garbage_collection_threshold:1.5", "garbage", "max_split_size_mb:20",
                                  "max_split_size_mb:-5", "max_split_size_mb:\u0663\u0660", "expandable_segments:TRUE",
                                  "backend:cudaMallocAsync", "roundup_power2_divisions:4"])
def test_bad_alloc_conf_is_one_config_error(capsys, conf):
    """What CUDAAllocatorConfig::parseArgs refuses (an unknown key, max_split_size_mb <= 20, not exactly True/False),
    and what changes bytes memsym does not simulate, are refused: by settings, and by --alloc-conf when it is read
    (with or without --memory)."""
    with pytest.raises(ConfigError):
        al.settings(conf)
    for extra in ((), ("--memory", "reserved")):
        code, out, err = run(capsys, "estimate", "--alloc-conf", conf, *extra)
        assert code == 2 and out == "" and "PYTORCH_CUDA_ALLOC_CONF" in err and len(err.strip().splitlines()) == 1


def test_alloc_conf_pytorch_accepts_is_read():
    s = al.settings("expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.6,"
                    "release_lock_on_cudamalloc:True")
    assert s.expandable and s.max_split == 512 << 20 and s.gc == 0.6


def test_nccl_p2p_connection_matches_the_allocations_nccl_logs():
    # NVIDIA/nccl#1685: an all-to-all on 8 H100s allocates, per channel and peer, 10485760 B (receive) and
    # 2097152 B (send) under NCCL_DEBUG_SUBSYS=ALLOC
    _, peer, *_ = od.terms()
    parts = {p.key: p for p in peer.parts}
    one = {"B_nccl": 4 * MiB, "C_ch": 1}
    assert od._value(type(peer)("x", "", "bytes", "", (parts["recv"],)), one) == 10485760
    assert od._value(type(peer)("x", "", "bytes", "", (parts["send"],)), one) == 2097152


def _layout(**kw):
    base = {"dp": 1, "tp": 1, "cp": 1, "pp": 1, "ep": 1, "etp": 1}
    base.update(kw)
    base["edp"] = base["dp"] * base["tp"] * base["cp"] // (base["ep"] * base["etp"])
    return type("L", (), base)()


# NVIDIA/nccl@5067397c, written out by hand: a P2P ring channel holds 6 MiB received (ncclRecvMem 4 KiB + LL 512 KiB
# + LL128 4,800 KiB, to 2 MiB) and 6 MiB sent (ncclSendMem 4 KiB + Simple 4 MiB); a NET ring channel (GPUDirect RDMA,
# net.cc) 10 MiB received (LL + LL128 + Simple = 9,408 KiB) and 10 MiB sent (LL128 + Simple = 8,896 KiB); a P2P peer
# channel 10 + 2 MiB; NET send/receive shares one 32 x 16 x 128 KiB buffer each way per communicator.
@pytest.mark.parametrize("kw,domain,want", [
    ({"dp": 8}, 8, {"NCCL DP ring (32 channels)": 32 * 12 * MiB}),
    # 8 of a DP ring's 16 ranks on a node: 4 of 32 channels enter and leave it over the network
    ({"dp": 16}, 8, {"NCCL DP ring (32 channels, 4 across nodes)": 28 * 12 * MiB + 4 * 20 * MiB}),
    ({"dp": 16}, 72, {"NCCL DP ring (32 channels)": 32 * 12 * MiB}),  # an NVL72 domain: P2P throughout
    # TP 8 fills the node: DP's ranks are 8 apart, one per node, every channel over the network
    ({"dp": 2, "tp": 8}, 8, {"NCCL DP ring (32 channels, 32 across nodes)": 32 * 20 * MiB,
                             "NCCL TP ring (32 channels)": 32 * 12 * MiB}),
    # EP 16: 7 peers by P2P, the 8 across nodes through the shared NET buffers; the expert-DP ring of 2, 16 apart
    ({"dp": 32, "ep": 16}, 8, {"NCCL DP ring (32 channels, 4 across nodes)": 28 * 12 * MiB + 4 * 20 * MiB,
                               "NCCL EDP ring (32 channels, 32 across nodes)": 32 * 20 * MiB,
                               "NCCL EP all-to-all, 7 peers": 7 * 32 * 12 * MiB,
                               "NCCL EP all-to-all, 8 peers across nodes": 2 * 32 * 16 * 128 * 1024}),
    # EP 1: the experts' gradients reduced over DP (Megatron-Core allreduce = not expert_parallel): no EDP ring
    ({"dp": 8, "ep": 1}, 8, {"NCCL DP ring (32 channels)": 32 * 12 * MiB}),
])
def test_each_communicator_is_sized_by_whether_its_ranks_span_nodes(kw, domain, want):
    assert {b.what: b.bytes for b in od.buffers(_layout(**kw), 7168, 2, domain=domain)} == want


P2P_PEER, NET_SHARED = 32 * 12 * MiB, 2 * 32 * 16 * 128 * 1024


# PP 16 of one GPU each (TP CP DP 1: rank = stage) on nodes of 8: a stage's neighbours are ranks stage -+ 1, on the
# same node unless the pair straddles ranks 7 | 8; the first and last stages of 1F1B have one neighbour, the
# interleaved schedule links stage 0 and stage 15 (rank 15, the second node).
@pytest.mark.parametrize("kw,stage,wrap,want", [
    ({"pp": 16}, 1, False, {"NCCL PP send/receive, 2 peers": 2 * P2P_PEER}),
    ({"pp": 16}, 0, False, {"NCCL PP send/receive, 1 peer": P2P_PEER}),
    ({"pp": 16}, 15, False, {"NCCL PP send/receive, 1 peer": P2P_PEER}),
    ({"pp": 16}, 7, False, {"NCCL PP send/receive, 1 peer": P2P_PEER,
                            "NCCL PP send/receive, 1 peer across nodes": NET_SHARED}),
    ({"pp": 16}, 0, True, {"NCCL PP send/receive, 1 peer": P2P_PEER,
                           "NCCL PP send/receive, 1 peer across nodes": NET_SHARED}),
    # PP 2 interleaved: the previous and next stage are one rank
    ({"pp": 2}, 0, True, {"NCCL PP send/receive, 1 peer": P2P_PEER}),
    # DP 4 (ranks 4-7 at stage 1): stage 0's ranks 0-3 on the node, stage 2's 8-11 on the next
    ({"dp": 4, "pp": 4}, 1, False, {"NCCL DP ring (32 channels)": P2P_PEER, "NCCL PP send/receive, 1 peer": P2P_PEER,
                                    "NCCL PP send/receive, 1 peer across nodes": NET_SHARED}),
    # DP 3 (stage 1: ranks 3-5; rank 5's next, 8, is on the next node, rank 3's and 4's on this one): the worst rank
    # holds the most, two P2P peers (rank 3 or 4)
    ({"dp": 3, "pp": 4}, 1, False, {"NCCL DP ring (32 channels)": P2P_PEER,
                                    "NCCL PP send/receive, 2 peers": 2 * P2P_PEER}),
])
def test_pipeline_neighbours_are_placed_by_rank(kw, stage, wrap, want):
    got = od.buffers(_layout(**kw), 7168, 2, domain=8, stage=stage, wrap=wrap)
    assert {b.what: b.bytes for b in got} == want


def test_the_nvlink_domain_of_the_command_places_the_buffers(capsys):
    """--gpus-per-node (and --nvlink-domain) under --memory device: DP 16 on nodes of 4 sends 8 of its 32 channels
    over the network (NET rings, 20 MiB a channel), on the H100's domain of 8 only 4."""
    argv = ("estimate", "--dp", "16", "--tp", "1", "--pp", "1", "--ep", "1", "--model", "deepseek-v2-lite",
            "--memory", "device", "--json")
    rings = {}
    for extra in ((), ("--gpus-per-node", "4"), ("--nvlink-domain", "16")):
        code, out, err = run(capsys, *argv, *extra)
        assert code == 0, err
        rings[extra] = [b for b in json.loads(out)["memory"]["buffers"] if "DP ring" in b["what"]]
    assert [b["bytes"] for b in rings[()]] == [28 * 12 * MiB + 4 * 20 * MiB]
    assert [b["bytes"] for b in rings[("--gpus-per-node", "4")]] == [24 * 12 * MiB + 8 * 20 * MiB]
    assert [b["bytes"] for b in rings[("--nvlink-domain", "16")]] == [32 * 12 * MiB]


def test_a_folder_that_cannot_be_made_is_refused_before_any_work(capsys):
    """page --out /proc/x: access() lets root write /proc, mkdir does not; refused before the 9 s of generation."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    code, _, err = run(capsys, "page", "--out", "/proc/memsym-x")
    assert code == 2 and "--out /proc/memsym-x: " in err and len(err.strip().splitlines()) == 1, err


def _deepep_nvl_hint(hidden_bytes, num_ranks, num_sms, recv_tokens):
    # deepseek-ai/DeepEP@79bbb546 csrc/config.hpp Config::get_nvl_buffer_size_hint, line by line (NVSHMEM on,
    # topk_idx_t int64_t, SourceMeta two ints)
    num_rdma_ranks = max(num_ranks // 8, 1)
    num_nvl_ranks = min(num_ranks, 8)
    num_channels = num_sms // 2
    n = num_channels * num_nvl_ranks * (2 * num_rdma_ranks + 3) * 4
    n += num_channels * num_nvl_ranks * recv_tokens * hidden_bytes
    n += num_channels * num_nvl_ranks * recv_tokens * 8
    n += num_channels * num_nvl_ranks * recv_tokens * 128 * 8
    n += num_channels * num_nvl_ranks * recv_tokens * 128 * 4
    n += num_channels * num_nvl_ranks * recv_tokens * 128 * 4
    return ((n + 127) // 128) * 128


@pytest.mark.parametrize("ep,hidden", [(8, 7168), (4, 2048), (16, 7168), (64, 6144)])
def test_deepep_buffer_is_its_own_size_hint(ep, hidden):
    # Megatron's fused_a2a get_buffer: max over get_dispatch_config / get_combine_config (deep_ep/buffer.py: 20 SMs;
    # num_max_nvl_chunked_recv_tokens 256 up to 8 ranks, 288 for 16-64), BF16 hidden bytes; Buffer's constructor adds
    # the 8 peers' signals and pointers (8 x (4 + 8 + 8) B) and the 32 MiB workspace
    tokens = {4: 256, 8: 256, 16: 288, 64: 288}[ep]
    _, _, deepep, *_ = od.terms()
    got = od._value(deepep, {"EP": ep, "T_nvl": od.deepep_tokens(ep), "h": hidden, "B_a": 2})
    assert got == _deepep_nvl_hint(2 * hidden, ep, 20, tokens) + 160 + 32 * MiB


def _deepep_rdma_hint(hidden_bytes, num_ranks, num_sms, send_tokens, recv_tokens):
    # deepseek-ai/DeepEP@79bbb546 csrc/config.hpp Config::Config (the RDMA receive tokens aligned up to the send
    # chunk) and Config::get_rdma_buffer_size_hint, line by line (NVSHMEM on, topk_idx_t int64_t, int4 16 B)
    recv_tokens = -(-recv_tokens // send_tokens) * send_tokens
    if num_ranks <= 8:
        return 0
    num_rdma_ranks = num_ranks // 8
    num_channels = num_sms // 2
    n = num_channels * num_rdma_ranks * (8 * 2 + 2) * 2 * 4
    n += num_channels * num_rdma_ranks * recv_tokens * hidden_bytes * 2
    n += num_channels * num_rdma_ranks * recv_tokens * 8 * 2
    n += num_channels * num_rdma_ranks * recv_tokens * 128 * 8 * 2
    n += num_channels * num_rdma_ranks * recv_tokens * 128 * 4 * 2
    n += num_channels * num_rdma_ranks * recv_tokens * 128 * 4 * 2
    n += num_channels * num_rdma_ranks * recv_tokens * 16 * 2
    return ((n + 127) // 128) * 128


@pytest.mark.parametrize("ep,hidden", [(16, 7168), (64, 6144), (128, 7168)])
def test_deepep_rdma_buffer_is_its_own_size_hint_across_nodes(ep, hidden):
    # deep_ep/buffer.py get_dispatch_config / get_combine_config: (rdma send, rdma recv) chunks, the largest hint
    configs = {16: ((20, 128), (12, 128)), 64: ((8, 128), (8, 128)), 128: ((12, 128), (8, 128))}[ep]
    want = max(_deepep_rdma_hint(2 * hidden, ep, 20, s, r) for s, r in configs)
    layout = type("L", (), {"dp": 1, "tp": 1, "cp": 1, "edp": 1, "pp": 1, "ep": ep, "etp": 1})()
    got = {b.term: b.bytes for b in od.buffers(layout, hidden, 2, "deepep")}
    assert got["device.deepep.rdma"] == want
    assert "device.deepep.rdma" not in {b.term for b in od.buffers(type("L", (), {**vars(type(layout)), "ep": 8})(),
                                                                     hidden, 2, "deepep")}


def test_unknown_deepep_ep_is_a_config_error():
    with pytest.raises(ConfigError):
        od.deepep_tokens(6)


RUN = "paper/runs/mcore-proxy-h1024-tp2pp2vpp4ep4.yaml"


def test_explain_names_each_buffer_with_its_rule(capsys):
    code, out, err = run(capsys, "estimate", "--from-megatron", RUN, "--gpus", "8", "--memory", "device", "--explain")
    assert code == 0, err
    for term, rule in (("device.nccl.ring", "computeBuffSizes"), ("device.nccl.peer", "nccl#1685"),
                       ("device.deepep", "get_nvl_buffer_size_hint"), ("device.context", "109888")):
        line = next(x for x in out.splitlines() if x.strip().startswith(term + ":"))
        assert rule in line


def test_memory_json_allocated_is_the_terms_and_device_adds_the_buffers(capsys):
    code, out, err = run(capsys, "estimate", "--from-megatron", RUN, "--gpus", "8", "--memory", "device", "--gpu",
                         "h100", "--stage", "1", "--json")
    assert code == 0, err
    d = json.loads(out)
    m = d["memory"]
    assert m["judged"] == "device" and m["alloc_conf"] == "expandable_segments:True"  # the file's ENV_VARS
    assert m["terms_total"] == d["bytes"]["step_total"]
    assert 0 <= m["allocated"] - m["terms_total"] < 1 * MiB  # the same peak, each block rounded up to 512 B
    assert m["allocated"] <= m["reserved"] < m["device"]
    assert m["device"] - m["reserved"] == sum(b["bytes"] for b in m["buffers"])
    # DP 2, TP 2 rings; PP 2: one send/receive peer; EP 4 all-to-all: 3 peers; 32 channels of 12 MiB each, all in
    # the H100's NVLink domain of 8 (the CUDA context is in the capacity, not here)
    per_channel = 12 * MiB
    assert [b["bytes"] for b in m["buffers"]] == [32 * per_channel] * 3 + [3 * 32 * per_channel]


@pytest.mark.parametrize("argv", [
    ("--schedule", "1f1b"),  # 16 micro-batches in flight on stage 0
    ("--gpus", "1024", "--tp", "2", "--pp", "32", "--ep", "8", "--zero", "2", "--global-batch", "15360"),  # 30
    ("--schedule", "interleaved", "--vpp", "2", "--stage", "3"),
    ("--schedule", "dualpipe", "--recompute", "full"),
])
def test_the_simulated_step_reaches_the_terms_peak_with_every_micro_batch_in_flight(capsys, argv):
    """Whatever the schedule holds in flight (here up to 30 micro-batches), the allocator's allocated peak is the
    terms' step total (each block rounded up), never a few micro-batches of it (the review's finding: 6 forwards
    were simulated, so a 1F1B stage of 16-30 in flight was judged at a fraction of its bytes)."""
    code, out, err = run(capsys, "estimate", "--gpu", "h800", "--memory", "device", "--json", *argv)
    assert code == 0, err
    m = json.loads(out)["memory"]
    assert 0 <= m["allocated"] - m["terms_total"] < 256 * MiB, m
    assert m["allocated"] <= m["reserved"] < m["device"]


#: One micro-batch as overheads_device.events reads it: two layers of 4 MiB and 0.5 MiB outside them
LAYERS = [(0, [("x", 4 * MiB, 0)]), (1, [("x", 4 * MiB, 0)]), ("out", [("out", MiB // 2, 0)])]


def test_events_hold_the_terms_activations_then_the_backward_moment():
    # 2 micro-batches in flight (2 x 8.5 MiB = 17 MiB held), the backward's transient 2 MiB on top: the allocated
    # peak is weights + activations + step = 10 + 17 + 2 MiB (the four layer blocks and the step split one 20 MiB
    # segment, its rest 2 MiB: every block its request)
    a = al.run(od.events(dict(weights=10 * MiB, activations=17 * MiB, step=2 * MiB), LAYERS))
    assert a.peak_allocated == 29 * MiB and a.allocated == 10 * MiB
    # 1.5 micro-batches (an interleaved head chunk, say): the terms' 12.75 MiB, the blocks short of it one block
    a = al.run(od.events(dict(weights=10 * MiB, activations=12 * MiB + 3 * MiB // 4, step=2 * MiB), LAYERS))
    assert a.peak_allocated == 10 * MiB + 12 * MiB + 3 * MiB // 4 + 2 * MiB


def test_a_larger_request_than_the_cached_segment_makes_a_new_one():
    # What routing variation does to the allocator: a request of 10 MiB or more gets a segment of its own size
    # rounded to 2 MiB (get_allocation_size), and best fit (get_free_block) only takes a cached block at least as
    # large; the smaller request splits the larger block (should_split: the 8 MiB rest is over 1 MiB)
    for first, then, reserved in ((36, 44, 80), (44, 36, 44)):
        a = al.Allocator()
        a.free(a.malloc(first * MiB))
        a.malloc(then * MiB)
        assert a.reserved == reserved * MiB, (first, then)


def test_routing_spread_is_the_balanced_routers_sampling_law():
    """sqrt(3) sigma / mu of the token-copies an EP rank receives under uniform top-k routing, the per-token law
    enumerated from its hypergeometric pmf (C(K, j) C(N - K, k - j) / C(N, k)): DeepSeek-V2-Lite (N 64, N_r 6)
    over EP 8 at b 4, s 4096: 131,072 tokens, 98,304 token-copies expected, about 0.50%."""
    n, k, ep, tokens = 64, 6, 8, 4 * 4096 * 8
    pmf = {j: Fraction(math.comb(n // ep, j) * math.comb(n - n // ep, k - j), math.comb(n, k)) for j in range(k + 1)}
    mean = sum(j * p for j, p in pmf.items())
    var = sum(j * j * p for j, p in pmf.items()) - mean ** 2
    want = math.sqrt(3 * tokens * var) / (tokens * mean)
    got = od._sampling_spread({"N": n, "N_r": k, "EP": ep, "b": 4, "s": 4096, "SP": 1, "CP": 1})
    assert tokens * mean == 98304 and abs(float(got) - want) < 1e-8 and round(want, 4) == 0.005
    assert od._sampling_spread({"N": n, "N_r": k, "EP": 1, "b": 4, "s": 4096}) == 0  # no EP: nothing received


def test_each_micro_batch_deals_every_layer_a_different_routed_count():
    assert sorted(od._z(0, 5)) == [-1, Fraction(-1, 2), 0, Fraction(1, 2), 1] and od._z(0, 1) == [0]
    assert od._z(3, 28) == od._z(3, 28) and od._z(3, 28) != od._z(4, 28)  # deterministic, per micro-batch


def test_events_never_allocate_what_the_terms_do_not_hold():
    # offloaded: 6 MiB of the 8.5 MiB micro-batch stays on the device (the first layer and 2 MiB of the second)
    a = al.run(od.events(dict(weights=MiB, activations=6 * MiB, step=MiB), LAYERS))
    assert a.peak_allocated == 8 * MiB


def test_largest_bisects_to_the_last_candidate_that_fits():
    calls = []
    need = lambda x: calls.append(x) or 10 * x  # noqa: E731
    assert al.largest(list(range(1, 101)), need, 375) == (37, 370)
    assert len(calls) <= 7
    assert al.largest([1, 2], need, 5) == (0, None)


def test_fit_memory_device_is_the_largest_b_whose_device_bytes_fit(capsys):
    code, out, err = run(capsys, "fit", "--gpu", "h100", "--zero", "2", "--memory", "device", "--json")
    assert code == 0, err
    m = json.loads(out)["memory"]
    assert m["judged"] == "device" and m["answer"] >= 1
    for b, fits in ((m["answer"], True), (m["answer"] + 1, False)):  # every stage fits at b; some does not at b + 1
        verdicts = []
        for stage in (0, 1, 15):  # the paper's stages: embedding, body, head
            code, text, err = run(capsys, "estimate", "--zero", "2", "--mbs", str(b), "--memory", "device", "--gpu",
                                  "h100", "--stage", str(stage), "--json")
            assert code == 0, err
            verdicts.append(json.loads(text)["memory"]["fits"])
        assert all(verdicts) if fits else not all(verdicts), (b, verdicts)


def test_runs_judge_oom_and_fits_by_the_kind_asked(capsys):
    ids = "torchtitan-dsv3-16b-fsdp8-ep8-oom,torchtitan-dsv3-16b-fsdp8-ep8-lbs4"
    got = {}
    for kind in ("allocated", "device"):
        code, out, err = run(capsys, "runs", "--id", ids, "--memory", kind, "--json")
        assert code == 0, err
        got[kind] = {r["id"]: r for r in json.loads(out)["runs"]}
    oom, res = (got["device"][i] for i in ids.split(","))
    assert oom["judged"] == "device" and got["allocated"]["torchtitan-dsv3-16b-fsdp8-ep8-oom"]["judged"] == "allocated"
    assert oom["predicted_bytes"] > got["allocated"]["torchtitan-dsv3-16b-fsdp8-ep8-oom"]["predicted_bytes"]
    assert "--memory reserved" in res["compared"]  # a reserved figure is compared with the allocator's reserved peak


def _flex(tmp_path, *flags):
    """The memory/speed test's launch file with its dispatcher flags replaced by ``flags``."""
    text = open(RUN).read().replace("  --moe-token-dispatcher-type: alltoall\n", "".join(f"  {f}\n" for f in flags))
    path = tmp_path / "flex.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("flags", [("--moe-token-dispatcher-type: flex",),
                                   ("--moe-token-dispatcher-type: flex", "--moe-flex-dispatcher-backend: deepep"),
                                   ("--moe-token-dispatcher-type: flex", "--moe-enable-deepep: true")])
def test_flex_with_deepep_reads_deepeps_buffer(tmp_path, capsys, flags):
    # transformer_config.py: moe_flex_dispatcher_backend defaults to "deepep"; moe_enable_deepep sets it
    code, out, err = run(capsys, "estimate", "--from-megatron", _flex(tmp_path, *flags), "--gpus", "8", "--memory",
                         "device", "--stage", "1", "--json")
    assert code == 0, err
    terms = [b["term"] for b in json.loads(out)["memory"]["buffers"]]
    assert "device.deepep" in terms and terms.count("device.nccl.peer") == 1  # PP's send/receive only


def test_flex_with_hybridep_keeps_the_nccl_all_to_all_and_says_so(tmp_path, capsys):
    path = _flex(tmp_path, "--moe-token-dispatcher-type: flex", "--moe-flex-dispatcher-backend: hybridep")
    code, out, err = run(capsys, "estimate", "--from-megatron", path, "--gpus", "8", "--memory", "device",
                         "--stage", "1", "--json")
    assert code == 0, err
    assert "--moe-flex-dispatcher-backend hybridep" in err  # named among what memsym does not model
    assert "device.deepep" not in [b["term"] for b in json.loads(out)["memory"]["buffers"]]


def test_megatron_routes_each_ranks_own_shard_of_tokens(capsys):
    """Megatron's all-to-all dispatcher: each of the 4 EP ranks routes its own b s/SP = 4 x 4096 / 2 tokens, top-4 of
    32 experts, so a rank's 8 experts receive 4 x 8192 x 4 x 8/32 = 32,768 token-copies (the paper's count, b s N_r/EP,
    is 16,384).  What they keep per copy: the grouped fc1 input (2 h B), its output (2 x 2 h_E B), the fused SwiGLU's
    product (2 h_E B) and the FP32 permuted probability (4 B); h = h_E = 1024."""
    per_copy = 2 * 1024 + 4 * 1024 + 2 * 1024 + 4
    rows = {}
    for typed in ((), ("--routed-tokens", "paper", "--router-tensors", "full")):
        code, out, err = run(capsys, "estimate", "--from-megatron", RUN, "--gpus", "8", "--stage", "1", "--json",
                             *typed)
        assert code == 0, err
        rows[typed] = json.loads(out)["bytes"]["activations_per_layer"]
    # the router's and dispatcher's tensors over b s = 16,384 tokens become those over 8,192: the FP32 sigmoid output,
    # the transposed probabilities and the load-balancing scores (3 x 4 N B), the routing map (N B), the top-4 indices
    # and sorted indices (2 x 8 N_r B), the top-k scores and normaliser (4 (N_r + 1) B), the normaliser (4 B)
    router = 3 * 4 * 32 + 32 + 2 * 8 * 4 + 4 * 5 + 4
    assert rows[()] - rows[("--routed-tokens", "paper", "--router-tensors", "full")] == (
        (32768 - 16384) * per_copy - 8192 * router)


def test_megatron_fsdp_keeps_its_non_unit_bucket_gathered(capsys):
    """Megatron-FSDP (optim_grads_params) keeps the bucket of the parameters outside its units, the word embedding,
    final norm and output layer, gathered in BF16 (param_and_grad_buffer.py AllGatherPipeline.reset:
    preserve_non_fsdp_units): v = 50,304 (50,257 padded to a multiple of 64), h = 512, TP 1, untied:
    (2 v h + h) x 2 B beside ZeRO-3's sharded weights."""
    path = "paper/runs/mcore-fsdp-proxy-ep2.yaml"
    weights = {}
    for typed in ((), ("--rank", "stage")):
        code, out, err = run(capsys, "estimate", "--from-megatron", path, "--gpus", "8", "--json", *typed)
        assert code == 0, err
        weights[typed] = json.loads(out)["bytes"]["weights"]
    assert weights[()] - weights[("--rank", "stage")] == (2 * 50304 * 512 + 512) * 2


@pytest.mark.parametrize("argv,named", [(("--alloc-conf", "expandable_segments:True"), "--alloc-conf"),
                                        (("--alloc-conf", "expandable_segments:True", "--memory", "allocated"),
                                         "--alloc-conf"),
                                        (("--nccl-buffsize", "1048576", "--memory", "reserved"), "--nccl-buffsize"),
                                        (("--tensors", "--memory", "device"), "--tensors"),
                                        # review of issue 46: silently accepted, now refused
                                        (("--gpus-per-node", "4"), "--time or --memory device"),
                                        (("--nvlink-domain", "16", "--memory", "reserved"), "--nvlink-domain"),
                                        (("--selective", "torchtitan-op", "--recompute", "none"), "--selective"),
                                        (("--memory", "reserved", "--alloc-conf",
                                          "max_split_size_mb:17592186044416"), "17592186044415"),  # SIZE_MAX / MiB
                                        (("--memory", "reserved", "--alloc-conf", "max_split_size_mb:" + "9" * 5000),
                                         "characters)"),
                                        (("--cuda-graphs", ""), "--cuda-graphs '':")])
def test_memory_options_that_change_nothing_are_refused_on_one_line(capsys, argv, named):
    code, _, err = run(capsys, "estimate", *argv)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err


def test_a_launch_files_alloc_conf_needs_no_memory_option(capsys, tmp_path):
    path = tmp_path / "run.yaml"
    env = "ENV_VARS:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True"
    path.write_text(open(RUN).read().replace("ENV_VARS:", env))
    code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
    assert code == 0, err


def test_all_stages_judges_the_most_loaded_stage(capsys):
    code, out, err = run(capsys, "estimate", "--from-megatron", RUN, "--gpus", "8", "--all-stages", "--memory",
                         "device", "--gpu", "h100", "--json")
    assert code == 0, err
    d = json.loads(out)
    # the H100's 79.11 GiB less the CUDA context's 400 MB
    assert d["memory"]["judged"] == "device" and d["memory"]["capacity"] == 84943715696 - 400 * 10 ** 6


def _search(capsys, *argv):
    code, out, err = run(capsys, "search", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


LAYOUT = ("dp", "tp", "pp", "ep", "etp", "cp", "zero", "mbs", "seq")


def _rows_are_estimates(capsys, d, kind, hbm, *argv, graphs=False):
    """Each row's judged bytes are memsym estimate --memory KIND's of its configuration (the oracle: the estimate
    command), at its most-loaded stage (under a schedule estimate's own choice of device), and fit the capacity."""
    assert d["rows"] and d["memory"]["kind"] == kind
    for r in d["rows"]:
        sched = ("--schedule", "1f1b", "--microbatches", str(r["microbatches"])) if "microbatches" in r else \
            ("--stage", str(r["stage"]))
        code, out, err = run(capsys, "estimate", "--json", "--hbm", hbm, "--memory", kind, "--attention",
                             d["attention"], "--recompute", r["recompute"], *sched,
                             *(x for k in LAYOUT for x in (f"--{k}", str(r[k]))), *argv)
        assert code == 0, err
        e = json.loads(out)
        assert e["stage"]["index"] == r["stage"], r
        m = e["memory"]
        assert (r["allocated"], r["reserved"], r["device"]) == (m["allocated"], m["reserved"], m["device"]), r
        assert m["fits"] and r[kind] <= d["hbm"] and (graphs or r["allocated"] >= r["total"]), r  # graphs: the pool


@pytest.mark.parametrize("kind,argv", [("device", ("--gpus", "256", "--top", "4")),
                                       ("reserved", ("--gpus", "512", "--global-batch", "4096", "--top", "3")),
                                       ("device", ("--model", "deepseek-v2-lite", "--gpus", "16", "--top", "4",
                                                   "--all-configurations"))])
def test_search_rows_are_estimates_judged_of_the_kind(capsys, kind, argv):
    d = _search(capsys, "--hbm", "80GiB", "--memory", kind, *argv)
    _rows_are_estimates(capsys, d, kind, "80GiB", *argv[:2] if argv[0] == "--model" else ())


def test_search_drops_a_configuration_that_fits_allocated_but_not_the_device(capsys):
    """The largest configuration of terms T at most 40 GiB (--sort peak, no overheads), against a capacity of
    T rounded up to a MiB plus a MiB: its terms fit, but its device bytes are at least T + the CUDA context's
    400 MB (pytorch/pytorch#109888), so it is dropped, counted, and every row listed instead fits."""
    argv = ("--model", "deepseek-v2-lite", "--gpus", "8", "--sort", "peak", "--all-configurations")
    (top,) = _search(capsys, "--hbm", "40GiB", "--overheads", "none", "--top", "1", *argv)["rows"]
    hbm = f"{-(-top['total'] // MiB) + 1}MiB"
    plain = _search(capsys, "--hbm", hbm, "--overheads", "none", "--top", "1", *argv)["rows"]
    assert [r["total"] for r in plain] == [top["total"]]  # it fits by its terms
    d = _search(capsys, "--hbm", hbm, "--memory", "device", "--top", "3", *argv)
    same = lambda r: all(r[k] == top[k] for k in LAYOUT + ("recompute",))  # noqa: E731
    assert not any(same(r) for r in d["rows"]) and d["memory"]["over_capacity"] >= 1
    assert d["memory"]["judged"] == len(d["rows"]) + d["memory"]["over_capacity"]
    _rows_are_estimates(capsys, d, "device", hbm, *argv[:2])


def test_search_memory_replaces_the_overheads_and_says_what_it_judged(capsys):
    code, _, err = run(capsys, "search", "--gpus", "64", "--memory", "device", "--overheads", "low")
    assert code == 2 and "--overheads" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = run(capsys, "search", "--gpus", "256", "--gpu", "h100", "--memory", "device", "--top", "2")
    assert code == 0, err
    assert "fit: --memory device: device bytes" in out and "NVIDIA H100 80GB HBM3 (SXM) 78.74 GiB" in out
    assert " device   free " in out


@pytest.mark.parametrize("budget,fits", [(("--gpu", "h100"), True), (("--hbm", "60GiB"), False)])
def test_with_memory_every_verdict_judges_its_kind(capsys, budget, fits):
    """Issue 46 item 1: with --memory the fit verdict, the cheapest change and the time's flag follow the kind judged
    (device 62.99 GiB here: fits an H100's 78.74 GiB, not 60 GiB), never the Sec. 6 high end (80.75 GiB)."""
    argv = ("estimate", "--dp", "16", "--tp", "1", "--pp", "16", "--ep", "4", "--etp", "1", "--zero", "2",
            "--attention", "flash", *budget, "--memory", "device", "--time")
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "device 62.99 GiB against" in out and "cheapest single change" not in out and "peak     80.75" not in out
    assert ("DOES NOT FIT" in out) is (not fits) and ("does not fit (--memory device above)" in out) is (not fits)
    assert ("no cheapest change judged by the device bytes" in out) is (not fits)
    code, out, err = run(capsys, *argv, "--json")
    d = json.loads(out)
    assert d["memory"]["fits"] is fits and "cheapest_change" not in d and "fits" not in d


def test_fit_says_which_kind_its_least_answers_judge(capsys):
    code, out, err = run(capsys, "fit", "--gpu", "h100", "--zero", "2", "--memory", "device")
    assert code == 0, err
    assert "(the least ZeRO stage and recomputation above judge the Sec. 6 peak at the high end, not the device " \
           "bytes)" in out


def test_search_cuda_graphs_judges_the_rows_it_lists_with_the_graphs(capsys):
    """Issue 46 item 1 on every command: search --cuda-graphs (with --memory: its ranking's vectorised terms have no
    capture) judges each row listed as estimate --cuda-graphs judges its configuration."""
    code, _, err = run(capsys, "search", "--gpus", "16", "--cuda-graphs", "attn")
    assert code == 2 and "--memory" in err and len(err.strip().splitlines()) == 1, err
    argv = ("--model", "deepseek-v2-lite", "--conventions", "mcore-te", "--cuda-graphs", "attn")
    d = _search(capsys, "--hbm", "80GiB", "--memory", "device", "--gpus", "16", "--top", "2", *argv)
    assert d["memory"]["cuda_graphs"] == ["attn"]
    _rows_are_estimates(capsys, d, "device", "80GiB", *argv, graphs=True)
    plain = _search(capsys, "--hbm", "80GiB", "--memory", "device", "--gpus", "16", "--top", "2", *argv[:4])
    assert [r["device"] for r in plain["rows"]] != [r["device"] for r in d["rows"]]


def test_hbm_is_a_total_the_cuda_context_is_taken_from(capsys):
    """--hbm under --memory is judged as --gpu's total is: less the CUDA context, 400 MB (pytorch/pytorch#109888)."""
    code, out, err = run(capsys, "estimate", "--hbm", "80GiB", "--memory", "device", "--json")
    assert code == 0, err
    assert json.loads(out)["memory"]["capacity"] == 80 * 2 ** 30 - 400 * 10 ** 6
    code, out, err = run(capsys, "estimate", "--hbm", "80GiB", "--memory", "device")
    assert "(usable: --hbm 80.00 GiB less the CUDA context 0.37 GiB" in out
    code, out, err = run(capsys, "estimate", "--hbm", "300MB", "--memory", "device")
    assert code == 2 and "CUDA context" in err and len(err.strip().splitlines()) == 1, err


# Written out by hand (Megatron-Core order: TP fastest, then CP, DP; the experts' ETP fastest, then EP): the gradients'
# ring is DP x CP (ranks TP apart), CP exchanges KV blocks with its previous and next CP rank (TE cp_comm_type p2p),
# ETP is a ring of its own.
@pytest.mark.parametrize("kw,want", [
    # TP 2 CP 4 DP 2 on nodes of 8: the DP x CP ring of 8 ranks 2 apart holds 4 per node (8 of 32 channels leave it);
    # a CP group's 4 ranks (2 apart) share a node: 2 P2P peers
    ({"tp": 2, "cp": 4, "dp": 2}, {"NCCL DP x CP ring (32 channels, 8 across nodes)": 24 * 12 * MiB + 8 * 20 * MiB,
                                   "NCCL TP ring (32 channels)": P2P_PEER,
                                   "NCCL CP send/receive, 2 peers": 2 * P2P_PEER}),
    # CP 2: the previous and next CP rank are one
    ({"cp": 2}, {"NCCL DP x CP ring (32 channels)": P2P_PEER, "NCCL CP send/receive, 1 peer": P2P_PEER}),
    # TP 2 DP 4 EP 4 ETP 2: EDP = 8 / 8 = 1 (no ring); ETP's ring of 2; EP's 4 ranks 2 apart on the node: 3 peers
    ({"tp": 2, "dp": 4, "ep": 4, "etp": 2}, {"NCCL DP ring (32 channels)": P2P_PEER,
                                             "NCCL TP ring (32 channels)": P2P_PEER,
                                             "NCCL ETP ring (32 channels)": P2P_PEER,
                                             "NCCL EP all-to-all, 3 peers": 3 * P2P_PEER}),
])
def test_context_and_expert_tensor_parallel_communicators(kw, want):
    assert {b.what: b.bytes for b in od.buffers(_layout(**kw), 7168, 2, domain=8)} == want


def test_fit_memory_device_solves_below_allocated_and_agrees_with_estimate(capsys):
    """Issue 46 item 1 on fit (with estimate's --gpus-per-node): near the capacity the device bytes (reserve + NCCL
    buffers) leave a smaller b than the allocated ones; at that b estimate --memory device fits every stage, at b + 1
    not, and fit's bytes are estimate's largest (the NCCL groups placed on nodes of 4 GPUs, not the default 8)."""
    argv = ("--gpu", "h100", "--zero", "1", "--recompute", "full")
    got = {}
    for kind, node in (("allocated", ()), ("device", ("--gpus-per-node", "4")), ("device", ())):
        code, out, err = run(capsys, "fit", *argv, "--memory", kind, *node, "--json")
        assert code == 0, err
        got[kind, node] = json.loads(out)["memory"]
    device = got["device", ("--gpus-per-node", "4")]
    assert 1 <= device["answer"] < got["allocated", ()]["answer"], got
    assert device["bytes"] != got["device", ()]["bytes"], got  # --gpus-per-node is used, not ignored
    for b, fits in ((device["answer"], True), (device["answer"] + 1, False)):
        judged = []
        for stage in (0, 1, 15):  # the paper's stages: embedding, body, head
            code, out, err = run(capsys, "estimate", *argv, "--mbs", str(b), "--memory", "device", "--gpus-per-node",
                                 "4", "--stage", str(stage), "--json")
            assert code == 0, err
            judged.append(json.loads(out)["memory"])
        assert all(m["fits"] for m in judged) is fits, (b, judged)
        if fits:
            assert device["bytes"] == max(m["device"] for m in judged)


@pytest.mark.parametrize("command", ["sensitivity", "compare"])
def test_memory_kind_on_sensitivity_and_compare_is_estimates(capsys, command):
    """Issue 46 item 1 on every command printing a device's total: sensitivity and compare --memory KIND print the
    stage's bytes of that kind, those of estimate --memory KIND (the paper's conventions)."""
    argv = ("--dp", "16", "--tp", "1", "--pp", "16", "--ep", "4", "--zero", "2")
    code, out, err = run(capsys, "estimate", *argv, "--memory", "reserved", "--json")
    assert code == 0, err
    want = json.loads(out)["memory"]
    code, out, err = run(capsys, command, *argv, "--memory", "reserved", "--json")
    assert code == 0, err
    d = json.loads(out)
    got = d["memory"] if command == "sensitivity" else d["presets"]["paper"]["memory"]
    assert got == want
    code, out, err = run(capsys, command, *argv, "--memory", "reserved")
    shown = f"{want['reserved'] / 2 ** 30:.2f} GiB" if command == "sensitivity" else f"{want['reserved']:,}"
    assert code == 0 and "reserved" in out and shown in out, out
