"""Pipeline schedules: in-flight micro-batches per stage, held activations, DualPipe's two copies."""
import json
from fractions import Fraction

import pytest
import sympy as sp

from derivations.assembly import schedules
from derivations.assembly.device import estimate, estimate_all
from derivations import config as cfg
from derivations import notation as nt
from memsym.cli import main


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def counts(name, pp, m=None, v=None):
    """Micro-batches of each stage's layers in flight (the head's own chunk apart)."""
    return [sum(c.inflight for c in schedules.chunks(name, pp, i, m, v) if c.part != "head") for i in range(pp)]


def megatron_interleaved_inflight(pp, v, m, rank):
    """An independent simulation of Megatron-Core's interleaved 1F1B order on one rank
    (pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving, microbatch group
    size PP): the k-th forward runs model chunk (k // PP) % V, the k-th backward chunk V-1 - (k // PP) % V;
    warm-up min(2 (PP - rank - 1) + (V - 1) PP, m V) forwards, then one forward and one backward each.
    Returns, after every forward, the count of each chunk in flight."""
    total = m * v
    warm = min(2 * (pp - rank - 1) + (v - 1) * pp, total)
    fwd_chunk = lambda k: (k // pp) % v
    bwd_chunk = lambda k: v - 1 - (k // pp) % v
    held, states, f, b_ = [0] * v, [], 0, 0
    for _ in range(warm):
        held[fwd_chunk(f)] += 1
        f += 1
        states.append(list(held))
    while f < total:
        held[fwd_chunk(f)] += 1
        f += 1
        states.append(list(held))
        held[bwd_chunk(b_)] -= 1
        b_ += 1
    return states


@pytest.mark.parametrize("name", ["1f1b", "zb"])
def test_1f1b_holds_min_m_pp_minus_i(name):
    for pp in (1, 2, 4, 16):
        assert counts(name, pp) == [pp - i for i in range(pp)]
        for m in (1, 3, pp, 2 * pp):
            assert counts(name, pp, m) == [min(m, pp - i) for i in range(pp)]
    # the first stage holds PP micro-batches whenever m >= PP
    assert counts(name, 16, 64)[0] == 16 and counts(name, 16, 16)[0] == 16 and counts(name, 16, 64)[-1] == 1


def test_interleaved_first_stage_is_megatrons_penalty():
    for pp, v in ((4, 2), (8, 3), (16, 2)):
        c = counts("interleaved", pp, None, v)
        assert c[0] == pp * (1 + Fraction(pp - 1, pp * v))   # theoretical_memory_usage.py
        assert c == [Fraction(2 * (pp - i - 1) + (v - 1) * pp + 1, v) for i in range(pp)]
    assert counts("interleaved", 4, 1, 2) == [1] * 4          # m V = 2 chunk-forwards at most
    assert schedules.formulas("interleaved")[0][1].has(nt.VPP)


def test_interleaved_holds_the_head_chunk_once_on_the_last_rank():
    """The head, loss and MTP modules are in the last rank's last model chunk: Megatron's order runs
    each of its forwards right before that micro-batch's backward, so it is held once, while the
    chunk-forwards in flight stay 2 (PP - i - 1) + (V - 1) PP + 1 (the layers' n_fl V)."""
    for pp, v, m in ((2, 4, 4), (2, 4, 8), (4, 2, 8), (4, 3, 16), (8, 2, 16)):
        states = megatron_interleaved_inflight(pp, v, m, pp - 1)
        assert max(st[v - 1] for st in states) == 1
        assert max(sum(st) for st in states) == (v - 1) * pp + 1
        ch = schedules.chunks("interleaved", pp, pp - 1, m, v)
        assert [(c.part, c.inflight) for c in ch] == [("layers", Fraction((v - 1) * pp + 1, v)), ("head", 1)]
    for pp, v, m in ((4, 2, 8), (4, 3, 16)):
        for rank in range(pp):
            states = megatron_interleaved_inflight(pp, v, m, rank)
            assert Fraction(max(sum(st) for st in states), v) == counts("interleaved", pp, m, v)[rank]
    for name in ("1f1b", "zb", "dualpipe"):       # elsewhere the head's stage holds one micro-batch anyway
        for pp in (2, 4):
            st = [c for i in range(pp) for c in schedules.chunks(name, pp, i, None, None) if c.stage == pp - 1]
            assert all(c.part == "all" and c.inflight == 1 for c in st)


def test_interleaved_estimate_counts_the_head_once(v3):
    """device.estimate under interleaved: n_fl x the last stage's activations without its head, plus
    the head once (the per-micro-batch head and the layers from estimates without a schedule)."""
    lay = cfg.Layout(pp=4)
    tr = cfg.Training(schedule="interleaved", vpp=2, microbatches=8)
    last = estimate(v3, lay, tr, 3)
    one = estimate(v3, lay, cfg.Training(), 3).bytes["activations"]
    layers = sum(r[2] for r in estimate(v3, lay, cfg.Training(), 3).by_layer)
    n_fl = Fraction((2 - 1) * 4 + 1, 2)
    assert last.bytes["activations"] == n_fl * layers + (one - layers)
    assert last.head_inflight == 1 and last.inflight == n_fl
    assert last.to_json()["inflight_head"] == 1
    assert "inflight_head" not in estimate(v3, lay, tr, 0).to_json()


def test_dualpipe_holds_pp_plus_one_split_between_the_two_stages():
    for pp in (2, 8, 16):
        for i in range(pp):
            ch = schedules.chunks("dualpipe", pp, i)
            assert [(c.stage, c.inflight) for c in ch] == [(i, pp - i), (pp - 1 - i, i + 1)]
            assert sum(c.inflight for c in ch) == pp + 1        # DeepSeek-V3 report, Table 2
    assert schedules.held_stages("dualpipe", 16, 1) == (1, 14)
    with pytest.raises(cfg.ConfigError):
        schedules.validate("dualpipe", 15, None, None)
    for m in (31, 30, 33):
        with pytest.raises(cfg.ConfigError):
            schedules.validate("dualpipe", 16, m, None)


def test_held_activations_are_inflight_times_one_microbatch(v3):
    lay = cfg.Layout()
    one = estimate(v3, lay, cfg.Training(), 0).bytes["activations"]
    for name, m in (("1f1b", 64), ("zb", 8), ("interleaved", None)):
        est = estimate(v3, lay, cfg.Training(schedule=name, microbatches=m), 0)
        assert est.bytes["activations"] == est.inflight * one
        assert est.bytes["activations_per_microbatch"] == one
        assert est.term_ids["activations"] == "act.peak"
    # the act.peak term is n_fl x act.stage
    from derivations import build
    peak = build(v3)["act.peak"]
    assert sp.expand(peak.expr - nt.n_fl * build(v3)["act.stage"].expr) == 0


def test_all_stages_acceptance_text(capsys):
    assert main(["estimate", "--schedule", "1f1b", "--microbatches", "64", "--all-stages"]) == 0
    out = capsys.readouterr().out
    rows = {int(line[2:8]): line for line in out.splitlines() if line[:2] in ("  ", "* ")
            and line[2:8].strip().isdigit()}
    assert len(rows) == 16
    assert rows[0].split()[-7] == "16" and "embedding, 3 dense, 1 MoE" in rows[0] and "0-3" in rows[0]
    assert rows[15].split()[-7] == "1" and "head" in rows[15]
    assert "most-loaded: stage 1" in out and [i for i, r in rows.items() if r.startswith("* ")] == [1]


def test_all_stages_json_marks_the_most_loaded(capsys):
    d = run_json(capsys, "estimate", "--schedule", "1f1b", "--microbatches", "64", "--all-stages")
    totals = [s["bytes"]["total"] for s in d["stages"]]
    assert d["most_loaded"] == totals.index(max(totals))
    assert [s["inflight_microbatches"] for s in d["stages"]] == [16 - i for i in range(16)]


def test_stage_defaults(capsys):
    base = run_json(capsys, "estimate")
    assert base["stage"]["index"] == 1 and "inflight_microbatches" not in base   # the foundation's contract
    d = run_json(capsys, "estimate", "--schedule", "1f1b")
    every, worst = estimate_all(cfg.PRESETS["deepseek-v3"], cfg.Layout(), cfg.Training(schedule="1f1b"))
    assert d["stage"]["index"] == worst
    assert d["bytes"]["activations"] == d["inflight_microbatches"] * d["bytes"]["activations_per_microbatch"]
    assert run_json(capsys, "estimate", "--schedule", "1f1b", "--stage", "5")["stage"]["index"] == 5


def test_dualpipe_doubles_the_weights(capsys):
    for stage in ("1", "7", "14"):
        a = run_json(capsys, "estimate", "--schedule", "1f1b", "--stage", stage)
        b = run_json(capsys, "estimate", "--schedule", "dualpipe", "--stage", stage)
        for k in ("weights", "gradients", "optimizer"):
            assert b["bytes"][k] == 2 * a["bytes"][k], (stage, k)
        assert b["stage"]["holds_stages"] == [int(stage), 15 - int(stage)]
        assert b["inflight_microbatches"] == 17


def test_dualpipe_end_stage_holds_stage_0_and_15(v3):
    lay = cfg.Layout()
    dual = estimate(v3, lay, cfg.Training(schedule="dualpipe"), 0)
    s0, s15 = estimate(v3, lay, cfg.Training(), 0), estimate(v3, lay, cfg.Training(), 15)
    assert dual.bytes["weights"] == s0.bytes["weights"] + s15.bytes["weights"]
    a0, a15 = s0.bytes["activations"], s15.bytes["activations"]
    assert dual.bytes["activations"] == 16 * a0 + 1 * a15


def test_schedule_options_validate():
    for t in (cfg.Training(vpp=2), cfg.Training(schedule="1f1b", vpp=2), cfg.Training(schedule="interleaved", vpp=1),
              cfg.Training(microbatches=4), cfg.Training(schedule="gpipe")):
        with pytest.raises(cfg.ConfigError):
            cfg.validate_training(t)


def test_vpp_without_a_schedule_says_what_to_add():
    """(adversarial review F10: it said `got schedule None`, a Python None)"""
    for t, said in ((cfg.Training(vpp=2), "add --schedule interleaved"),
                    (cfg.Training(schedule="1f1b", vpp=2), "got --schedule 1f1b")):
        with pytest.raises(cfg.ConfigError) as exc:
            cfg.validate_training(t)
        assert str(exc.value).endswith(said) and "None" not in str(exc.value), exc.value


def _megatron_schedules():
    try:
        from megatron.core.pipeline_parallel import schedules as ms
    except Exception:  # the trace extra (megatron-core) is not installed
        return None
    return ms


@pytest.mark.skipif(_megatron_schedules() is None, reason="needs megatron-core (pip install 'memsym[trace]')")
def test_interleaved_order_is_megatron_cores_own_table():
    """schedules.interleaved_order against Megatron-Core's own functions (pipeline_parallel/schedules.py:
    get_schedule_table for the forward order, the backward chunk V-1 - chunk as get_model_chunk_id,
    get_pp_rank_microbatches for the warm-up), for every rank, at every m Megatron accepts (multiples of PP)."""
    from types import SimpleNamespace
    ms = _megatron_schedules()
    for pp in (2, 3, 4):
        for v in (2, 3, 4):
            for m in (pp, 2 * pp, 3 * pp):
                table = ms.get_schedule_table(m, v, pp)
                for rank in range(pp):
                    comm = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: pp, rank=lambda r=rank: r),
                                           virtual_pipeline_model_parallel_size=v)
                    total, _, warm, _ = ms.get_pp_rank_microbatches(m, v, pp, p2p_communicator=comm)
                    held, states, b_ = [0] * v, [], 0
                    for f in range(total):
                        held[table[f][1]] += 1
                        states.append(tuple(held))
                        if f + 1 > warm:
                            held[v - 1 - table[b_][1]] -= 1
                            b_ += 1
                    assert schedules.interleaved_order(pp, v, m, rank) == states, (pp, v, m, rank)


def test_virtual_layers_peak_is_the_hand_counted_state():
    """--virtual-layers 3,2,2,2,2,2,2,1 (Megatron's Et*3|(tt|)*6tmL) at PP 2, V 4, m 4: rank 1's chunks hold
    2, 2, 2 and 1 layers; after its 7 warm-up forwards it holds chunks 0-2 twice and chunk 3 (with the
    head, loss and MTP module) once: 13 layer-micro-batches and the head once.  Expected from the
    no-schedule estimate of the same stage (7 MoE layers L each, and the head H outside them)."""
    from dataclasses import replace as dreplace
    from derivations.assembly.conventions import with_preset, with_switch
    model = cfg.load_model("paper/models/mcore-proxy-h1024-l16-d3-mtp1.json")
    lay = cfg.Layout(dp=2, tp=2, pp=2, ep=4, etp=1, sp=2, layers_per_stage=(9, 7))
    base = with_switch(with_preset(cfg.Training(mbs=4, seq=4096), "mcore-te"), "mtp_activations", "last-stage")
    plain = estimate(model, lay, base, 1)
    L = {r[2] for r in plain.by_layer}
    assert len(L) == 1 and len(plain.by_layer) == 7
    L, H = L.pop(), plain.outside_layers
    tr = dreplace(base, schedule="interleaved", vpp=4, microbatches=4, virtual_layers=(3, 2, 2, 2, 2, 2, 2, 1))
    est = estimate(model, lay, tr, 1)
    assert est.bytes["activations"] == 13 * L + H
    assert [n for _, n in est.chunks] == [2, 2, 2, 1] and est.head_inflight == 1
    assert est.inflight == Fraction(13, 7)
    with pytest.raises(cfg.ConfigError, match="multiple of PP"):
        estimate(model, lay, dreplace(tr, microbatches=3), 1)
    with pytest.raises(cfg.ConfigError, match="PP x V"):
        estimate(model, lay, dreplace(tr, virtual_layers=(3, 2, 2, 2, 2, 2, 3)), 1)
    with pytest.raises(cfg.ConfigError, match="contiguous"):      # rank 0 would hold 2 of the 3 dense layers
        estimate(model, lay, dreplace(tr, virtual_layers=(2, 3, 2, 2, 2, 2, 2, 1)), 0)


def test_fit_and_sensitivity_refuse_virtual_layers(capsys):
    for cmd in (["fit", "--hbm", "80GiB"], ["sensitivity"]):
        assert main(cmd + ["--schedule", "interleaved", "--vpp", "2", "--pp", "2",
                           "--virtual-layers", "30,30,1,0"]) == 2
        assert "no closed form" in capsys.readouterr().err


def test_the_distinct_states_hold_the_largest_of_the_whole_order():
    """schedules.distinct_states (warm-up and one steady-state period, what the peak is taken over)
    against the whole order it shortens, for every small layout and a long step."""
    import itertools
    for pp, v in itertools.product((1, 2, 3, 4), (1, 2, 3, 5)):
        for m in (pp, 2 * pp, 7 * pp, 40 * pp):
            for rank in range(pp):
                whole = schedules.interleaved_order(pp, v, m, rank)
                short = schedules.distinct_states(pp, v, m, rank)
                assert short == whole[:len(short)] and set(short) == set(whole), (pp, v, m, rank)
    assert len(schedules.distinct_states(4, 8, 2 ** 20, 0)) <= 2 * (4 - 1) + 7 * 4 + 4 * 8
