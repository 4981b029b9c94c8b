"""memsym search under --offload-activations, --linear-recipe and --virtual-layers (issue 42 item 4, one assembly).

The options are terms of the printed per-device assembly (derivations/assembly/device_terms.py, variants
``+options``); search evaluates every configuration by it (derivations/analyses/exact.py) and each row must equal
``memsym estimate`` of its configuration at its stage, byte for byte.  Since both read the same assembly, each option
is also checked at one point against numbers by hand from the framework source the existing tests cite
(tests/test_offload.py: Megatron-LM d98e8a64's offload groups and 2^20-element threshold; tests/test_quantized.py:
Transformer Engine's saved quantized inputs; tests/test_schedules.py: Megatron-Core's interleaved order)."""
from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import sympy as sp

from clirun import run
from derivations import config as cfg
from derivations.assembly import device_terms as dt
from derivations.assembly.conventions import with_preset, with_switch
from derivations.assembly import device
from derivations.assembly.device import estimate

MODELS = Path(__file__).resolve().parent.parent / "paper" / "models"
L15 = str(MODELS / "mcore-proxy-h1024-l15-d3.json")
L16 = str(MODELS / "mcore-proxy-h1024-l16-d1-mtp1.json")
L16D3 = str(MODELS / "mcore-proxy-h1024-l16-d3-mtp1.json")


def _inlined(exprs, given=()):
    """{name: expression in the inputs only} of an assembly (each name's expression with the names before it
    substituted); ``given``: names that are inputs of the variant."""
    out = {}
    for name, expr in exprs:
        out[name] = sp.expand(expr.xreplace({sp.Symbol(k, nonnegative=True): v for k, v in out.items()}))
    return out


def test_the_variants_without_options_are_the_options_at_zero():
    """Every variant with the options' terms is the plain one at O = Q = 0 (a given hold: its held activations)."""
    zero = {sp.Symbol(k, nonnegative=True): 0 for k in dt.OFFLOAD + dt.QUANTIZED}
    held = {sp.Symbol("activations_held", nonnegative=True): sp.Symbol("activations", nonnegative=True)}
    for _, mtp, full, holds in dt.variants():
        plain = _inlined(dt.assembly(mtp, full, holds))
        with_options = _inlined(dt.assembly(mtp, full, holds, options=True))
        if holds == "given":  # the plain variant reads its activations, the options' their held part
            with_options.pop("activations")
        assert set(plain) == set(with_options)
        for name, expr in with_options.items():
            assert sp.expand(expr.xreplace(zero).xreplace(held) - plain[name]) == 0, (mtp, full, holds, name)
        assert any(expr.free_symbols & set(zero) for expr in with_options.values())


def _search(capsys, *argv):
    code, out, err = run(capsys, "search", "--gpus", "8", "--hbm", "1000GiB", "--conventions", "mcore-te",
                         "--all-configurations", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def _estimate(capsys, model, row, *argv):
    code, out, err = run(capsys, "estimate", "--json", "--model", model, "--conventions", "mcore-te",
                         "--dp", str(row["dp"]), "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--ep", str(row["ep"]),
                         "--etp", str(row["etp"]), "--cp", str(row["cp"]), "--zero", str(row["zero"]),
                         "--recompute", row["recompute"], "--mbs", str(row["mbs"]), "--seq", str(row["seq"]),
                         "--stage", str(row["stage"]), *argv)
    assert code == 0, err
    return json.loads(out)


def _rows_equal_estimate(capsys, d, model, argv, n=5, seed=0):
    """n random rows of a search (and its first and last) against estimate --json of their configuration."""
    rows = d["rows"]
    assert rows
    pick = sorted({0, len(rows) - 1, *np.random.default_rng(seed).integers(0, len(rows), n).tolist()})
    for r in (rows[i] for i in pick):
        extra = ["--microbatches", str(r["microbatches"])] if "microbatches" in r and r["microbatches"] > 0 else []
        e = _estimate(capsys, model, r, "--attention", d["attention"], *argv, *extra)
        for k in ("weights", "gradients", "optimizer"):
            assert r[k] == e["bytes"][k], (r, k)
        assert r["activations"] == e["bytes"]["activations"] + e["bytes"]["step"], r
        assert r["total"] == e["bytes"]["step_total"], r
        peak = Fraction(str(e["overheads"]["high"]["step_peak"]))
        assert r["peak"] == round(peak) and r["headroom"] == round(d["hbm"] - peak), r
    return rows


def _row(rows, **at):
    (r,) = [r for r in rows if all(r[k] == v for k, v in at.items())]
    return r


PROXY = dict(dp=2, tp=2, pp=2, ep=4, etp=1, cp=1)


def test_offloading_rows_equal_estimate_and_the_hand_count(capsys):
    argv = ["--offload-activations", "mlp_norm"]
    d = _search(capsys, "--model", L15, "--mbs", "1", "--zero", "1,3", *argv)
    assert set(r["recompute"] for r in d["rows"]) == {"none", "selective"}  # full: refused with offloading
    rows = _rows_equal_estimate(capsys, d, L15, argv)
    # by hand (tests/test_offload.py BY_HAND): mlp_norm's group is the sublayer input, 2 b s h / SP bytes per layer,
    # dense or MoE; every layer of the stage offloads it but the rank's last (the offload margin)
    plain = _search(capsys, "--model", L15, "--mbs", "1", "--zero", "1,3")["rows"]
    at = dict(PROXY, zero=1, recompute="none", mbs=1)
    on, off = _row(rows, **at), _row(plain, **at)
    layers = {0: 8, 1: 7}[on["stage"]]  # 15 layers at PP 2: layers 0-7 (3 dense, 5 MoE), 8-14 (7 MoE) and the head
    assert off["stage"] == on["stage"]
    assert off["activations"] - on["activations"] == (layers - 1) * 2 * 1 * 4096 * 1024 // 2


def test_core_attn_offloading_rows_equal_estimate(capsys):
    argv = ["--offload-activations", "core_attn"]
    d = _search(capsys, "--model", L15, "--mbs", "1", "--zero", "1", "--attention", "eager", *argv)
    _rows_equal_estimate(capsys, d, L15, argv, seed=1)


def test_linear_recipe_rows_equal_estimate_and_the_hand_count(capsys):
    argv = ["--linear-recipe", "tensorwise"]
    # (Megatron-FSDP runs ZeRO 1, 2 and 3; mcore-te's own framework, megatron, ZeRO 0 and 1 only)
    d = _search(capsys, "--model", L16, "--mbs", "4", "--zero", "1,2,3", "--recompute", "none", *argv,
                "--framework", "megatron-fsdp")
    assert {r["zero"] for r in d["rows"]} == {1, 2}  # ZeRO-3: refused with a linear recipe
    rows = _rows_equal_estimate(capsys, d, L16, argv)
    # by hand (tests/test_quantized.py MLA, MOE at the same proxy, b 4, s 4096): one MoE layer micro-batch changes
    # by the up-projections' fused norm output and the MoE sublayer's linear inputs, 1 B instead of B_a = 2
    # (the grouped fc1 and fc2 inputs: b s N_r / SP token copies, each EP rank routing its own sequence-parallel
    # shard, Megatron-LM d98e8a64 moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, output_splits)
    b, s, h, SP, NR, H_E = 4, 4096, 1024, 2, 4, 1024
    mla = -b * s * (1536 + 512) // SP
    moe = b * s * h // SP - b * s * NR // SP * h - b * s * NR // SP * H_E - b * s * H_E
    plain = _search(capsys, "--model", L16, "--mbs", "4", "--zero", "1", "--recompute", "none")["rows"]
    at = dict(PROXY, zero=1, recompute="none", mbs=4)
    on, off = _row(rows, **at), _row(plain, **at)
    assert on["stage"] == off["stage"] == 1  # layers 8-15, all MoE, and the head (no MTP activations)
    assert on["activations"] - off["activations"] == 8 * (mla + moe)
    # and the mxfp8 recipe of the acceptance at one row
    d = _search(capsys, "--model", L16, "--mbs", "4", "--zero", "1", "--recompute", "none", "--linear-recipe", "mxfp8")
    _rows_equal_estimate(capsys, d, L16, ["--linear-recipe", "mxfp8"], n=2)


def test_virtual_layers_rows_equal_estimate_and_the_hand_count(capsys):
    """PP 2, V 4, m 4 (tests/test_schedules.py): rank 1 holds chunks of 2 layers (its virtual stages 1, 3, 5, 7),
    after its 7 warm-up forwards chunks 0-2 twice and chunk 3 with the head once: 14 layer micro-batches."""
    argv = ["--schedule", "interleaved", "--vpp", "4", "--microbatches", "4", "--virtual-layers", "3,2,2,2,2,2,1,2"]
    d = _search(capsys, "--model", L16D3, "--mbs", "4", "--zero", "1", "--recompute", "none,selective", *argv)
    assert d["counts"]["invalid_configurations"]["virtual-layers"] > 0  # PP other than 2
    rows = _rows_equal_estimate(capsys, d, L16D3, argv)
    assert {(r["pp"], r["microbatches"]) for r in rows} == {(2, 4)}
    model = cfg.load_model(L16D3)
    lay = cfg.Layout(**PROXY, sp=2)
    base = with_switch(with_preset(cfg.Training(mbs=4, seq=4096, zero=1, attention="flash"), "mcore-te"),
                       "mtp_activations", "none")
    plain = estimate(model, lay, base, 1)
    (L,) = {x for _, _, x in plain.by_layer}
    tr = replace(base, schedule="interleaved", vpp=4, microbatches=4, virtual_layers=(3, 2, 2, 2, 2, 2, 1, 2))
    est = estimate(model, lay, tr, 1)
    assert est.bytes["activations"] == 14 * L + plain.outside_layers
    r = _row(rows, **dict(PROXY, zero=1, recompute="none", mbs=4))
    devices = [estimate(model, lay, tr, i) for i in (0, 1)]
    worst = max((0, 1), key=lambda i: (devices[i].bytes["step_total"], -i))
    assert r["stage"] == worst and r["total"] == devices[worst].bytes["step_total"]


OPTIONS = [  # (model, conventions preset, what the configurations run)
    (L15, "mcore-te", dict()),
    (L15, "mcore", dict(offload=("mlp_norm", "expert_fc1"))),
    (L15, "mcore-te", dict(offload=("core_attn", "attn_norm"), attention="eager")),
    (L16, "mcore-te", dict(linear_recipe="mxfp8", quantized_params=True)),
    (L16, "mcore-te", dict(linear_recipe="delayed", attention="eager")),
    (L16D3, "mcore-te", dict(offload=("qkv_linear", "moe_act"))),
]


def test_every_stage_at_once_equals_estimate_at_every_row():
    """The paper's view evaluates every (layout, stage) at once (derivations/analyses/exact.py ``_vector``):
    every row of a search over 8 GPUs is ``device.components`` (estimate's assembly, exactly) at its configuration
    and stage, and that stage is the first most-loaded of the layout's distinct stages."""
    from derivations.analyses import exact
    from derivations.analyses.enumeration import distinct_stages, enumerate_layouts
    for path, preset, opts in OPTIONS:
        model = cfg.load_model(path)
        training = replace(with_preset(cfg.Training(attention=opts.pop("attention", "flash")), preset), **opts)
        enum = enumerate_layouts(model, 8, (4096,))
        pairs = [(z, r) for z in (0, 1, 2, 3) for r in ("none", "selective", "full")]
        cols, _, _ = exact.run(model, training, pairs, enum, (4096,), (1, 2))
        policies = tuple(dict.fromkeys(r for _, r in exact.choices(training, pairs)))
        assert len(cols["total"]) > 0
        for i in range(len(cols["total"])):
            row = {k: int(v[i]) if v.dtype.kind == "i" else float(v[i]) for k, v in cols.items()}
            layout = cfg.Layout(dp=row["dp"], tp=row["tp"], pp=row["pp"], ep=row["ep"], etp=row["etp"],
                                cp=row["cp"], sp=row["sp"])
            t = replace(training, zero=row["zero"], recompute=policies[row["recompute"]], recompute_ops=(),
                        mbs=row["mbs"], seq=row["seq"])
            got = {st.index: device.components(model, layout, t, st.index) for st in distinct_stages(model, layout)}
            _is_the_most_loaded(row, got, (path, opts, row))


def _is_the_most_loaded(row, got, why):
    """The search ``row`` is the first most-loaded of ``got`` ({stage: device.components}), component by
    component."""
    worst = max(got, key=lambda k: (got[k]["step_total"], -k))
    assert row["stage"] == worst, why
    e = got[worst]
    for k in ("weights", "gradients", "optimizer"):
        assert round(row[k]) == round(e[k]), (*why, k)
    assert round(row["activations"]) == round(e["activations"] + e["step"]), why
    assert round(row["total"]) == round(e["step_total"]), why


SCHEDULED = [  # (model, conventions preset, switches, what the configurations run, global batch)
    (L16, "mcore-te", dict(mtp=True), dict(schedule="1f1b"), 32),
    (L16, "mcore-te", dict(mtp=True), dict(schedule="dualpipe"), 32),
    (L16D3, "mcore", dict(mtp=True, mtp_activations="last-stage"), dict(schedule="interleaved", vpp=2,
                                                                       offload=("mlp_norm",)), 16),
    (L16, "megatron", dict(mtp=True), dict(schedule="zb", microbatches=8), None),
    (L16D3, "mcore-te", dict(mtp=True), dict(schedule="interleaved", vpp=4, microbatches=4,
                                             virtual_layers=(3, 2, 2, 2, 2, 2, 1, 2), linear_recipe="mxfp8"), None),
]


def test_every_device_at_once_equals_estimate_at_every_row_under_a_schedule():
    """Under a schedule every device of every layout is evaluated at once (``_vector``): every row of a search over 8
    GPUs with --mtp (and DualPipe's two stages, the interleaved chunks, Megatron's pipeline layout, the megatron rank)
    is ``device.components`` (estimate's assembly, exactly, one device at a time) at its configuration and the
    first most-loaded device, m = global batch / (DP b); the configurations the schedule refuses are counted."""
    from derivations.analyses import exact
    from derivations.analyses.enumeration import enumerate_layouts
    for path, preset, switches, opts, gb in SCHEDULED:
        model = cfg.load_model(path)
        training = with_preset(cfg.Training(attention="flash"), preset)
        training = replace(training, conventions=replace(training.conventions, **switches), **opts)
        enum = enumerate_layouts(model, 8, (4096,))
        pairs = [(z, r) for z in (1, 2) for r in ("none", "selective")]
        cols, invalid, _ = exact.run(model, training, pairs, enum, (4096,), (1, 2), gb)
        policies = tuple(dict.fromkeys(r for _, r in exact.choices(training, pairs)))
        assert len(cols["total"]) > 0
        refused = 0
        for layout in enum.layouts:
            for b in (1, 2):
                m = gb // (layout.dp * b) if gb is not None and gb % (layout.dp * b) == 0 else None
                t = replace(training, mbs=b, microbatches=m if gb is not None else training.microbatches)
                if gb is not None and m is None:
                    continue
                try:
                    device.components(model, layout, t, 0)
                except cfg.ConfigError:
                    refused += 1
        assert sum(v for k, v in invalid.items() if k != "global-batch") == refused, (path, opts, invalid)
        for i in range(len(cols["total"])):
            row = {k: int(v[i]) if v.dtype.kind == "i" else float(v[i]) for k, v in cols.items()}
            layout = cfg.Layout(dp=row["dp"], tp=row["tp"], pp=row["pp"], ep=row["ep"], etp=row["etp"],
                                cp=row["cp"], sp=row["sp"])
            if gb is not None:
                assert row["microbatches"] * row["dp"] * row["mbs"] == gb
            t = replace(training, zero=row["zero"], recompute=policies[row["recompute"]], recompute_ops=(),
                        mbs=row["mbs"], seq=row["seq"], microbatches=row["microbatches"] if gb is not None
                        else training.microbatches)
            got = {k: device.components(model, layout, t, k) for k in range(layout.pp)}
            _is_the_most_loaded(row, got, (path, opts, row))


def test_a_scheduled_mtp_search_lists_what_estimate_prints(capsys):
    """search --schedule interleaved --mtp --global-batch: random rows against estimate --json of their configuration
    (its m, its most-loaded device: estimate's own choice under a schedule)."""
    argv = ["--mtp", "--schedule", "interleaved", "--vpp", "2"]
    d = _search(capsys, "--model", L16, "--mbs", "1,2", "--zero", "1", "--global-batch", "32", *argv)
    assert all(r["microbatches"] * r["dp"] * r["mbs"] == 32 for r in d["rows"])
    rows = d["rows"]
    assert rows
    for r in (rows[i] for i in sorted({0, len(rows) - 1, *np.random.default_rng(2).integers(0, len(rows), 5)})):
        code, out, err = run(capsys, "estimate", "--json", "--model", L16, "--conventions", "mcore-te",
                             *(x for k in ("dp", "tp", "pp", "ep", "etp", "cp", "zero", "mbs", "seq", "microbatches")
                               for x in (f"--{k}", str(r[k]))), "--recompute", r["recompute"], *argv)
        assert code == 0, err
        e = json.loads(out)
        assert e["stage"]["index"] == r["stage"], r
        for k in ("weights", "gradients", "optimizer"):
            assert r[k] == e["bytes"][k], (r, k)
        assert r["activations"] == e["bytes"]["activations"] + e["bytes"]["step"], r
        assert r["total"] == e["bytes"]["step_total"], r


def test_a_search_estimate_refuses_is_refused_on_one_line(capsys):
    """A linear recipe off the stage rank, which estimate refuses, refuses the search with estimate's own line."""
    for gpus in ("64", "8"):
        code, out, err = run(capsys, "search", "--gpus", gpus, "--conventions", "mcore-te", "--rank", "megatron",
                             "--linear-recipe", "mxfp8")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "--rank stage" in err, err


def test_a_micro_batch_size_that_divides_no_layouts_global_batch_is_counted_not_a_crash(capsys):
    """--global-batch 6 on 8 GPUs: mbs 4 divides no DP's share (DP in 1, 2, 4, 8), so that b has no layout left;
    it is counted invalid and the other sizes still list rows (the rewrite raised IndexError on the empty group)."""
    code, out, err = run(capsys, "search", "--gpus", "8", "--gpu", "h800", "--model", "deepseek-v2-lite",
                         "--global-batch", "6", "--json")
    rows = json.loads(out)["rows"]
    assert code == 0 and err == "" and rows and {r["mbs"] for r in rows} <= {1, 2, 3}
    code, out, err = run(capsys, "search", "--gpus", "8", "--gpu", "h800", "--global-batch", "2", "--mbs", "4")
    assert code == 0 and "invalid configurations: global-batch" in out and "no configuration fits" in out


def test_imbalance_rows_equal_estimate_and_the_hand_count(capsys):
    """search --imbalance F (issue 46 item 8): every configuration judged at the upper end F, each row what estimate
    --imbalance F gives it; said in the JSON and the text."""
    argv = ["--imbalance", "1.5"]
    d = _search(capsys, "--model", L16, "--mbs", "1,4", "--zero", "1", *argv)
    assert d["routing"] == {"judged_at": 1.5, "balanced": 1}
    _rows_equal_estimate(capsys, d, L16, argv)
    code, out, err = run(capsys, "search", "--gpus", "8", "--model", L16, "--imbalance", "1.5", "--top", "1")
    assert code == 0 and "routing: judged at the upper end of the skew, F = 1.5" in out, err
    # by hand (tests/test_routing_skew.py, the paper's formula): at the paper's layout a stage of 4 MoE layers with
    # EP 8 holds M_1^E's routed part (N/EP)(3 E_token h + 8 E_token h_E), E_token = F b s N_r / N, so from F = 1 to
    # 1.5 it grows by 4 x 32 x (3 x 7168 + 8 x 2048) x 64 bytes
    paper = ("search", "--gpus", "1024", "--conventions", "paper", "--attention", "eager", "--mbs", "1", "--zero",
             "0", "--recompute", "none", "--hbm", "1000GiB", "--all-configurations", "--json")
    got = []
    for extra in ((), ("--imbalance", "1.5")):
        code, out, err = run(capsys, *paper, *extra)
        assert code == 0, err
        got.append(_row(json.loads(out)["rows"], dp=32, tp=2, pp=16, ep=8, etp=1, cp=1))
    off, on = got
    assert on["stage"] == off["stage"] and on["stage"] not in (0, 15)  # a stage of 4 MoE layers
    assert on["activations"] - off["activations"] == 4 * 32 * (3 * 7168 + 8 * 2048) * 64 == 310_378_496


def test_imbalance_memory_rows_are_estimates_device_at_F(capsys):
    """search --imbalance F --memory device: each judged row's device bytes are estimate --imbalance F --memory
    device of its configuration at its stage."""
    code, out, err = run(capsys, "search", "--gpus", "8", "--model", L16, "--gpu", "h100", "--imbalance", "1.5",
                         "--memory", "device", "--top", "2", "--json")
    assert code == 0, err
    for r in json.loads(out)["rows"]:
        e = _estimate_json(capsys, L16, r, "--gpus", "8", "--gpu", "h100", "--imbalance", "1.5", "--memory", "device")
        assert (r["reserved"], r["device"]) == (e["memory"]["reserved"], e["memory"]["device"]), r


def _estimate_json(capsys, model, row, *argv):
    code, out, err = run(capsys, "estimate", "--json", "--model", model, *(f"--{k}={row[k]}" for k in (
        "dp", "tp", "pp", "ep", "etp", "cp", "zero", "recompute", "mbs", "seq", "stage")), *argv)
    assert code == 0, err
    return json.loads(out)


def test_a_capacity_factor_is_refused_by_search_in_one_line_saying_where_it_is_read(capsys):
    """--capacity-factor bounds F per layout (b, s, SP, CP, EP: training.capacity_bound), search judges one F for
    every configuration: refused with the reason and where the option is read, not as an unknown argument."""
    for extra in (["--capacity-factor", "1.25"], ["--pad-to-capacity"], ["--capacity-factor", "2", "--json"]):
        code, out, err = run(capsys, "search", "--gpus", "8", "--model", "deepseek-v2-lite", *extra)
        assert code == 2 and out == "", extra
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "--capacity-factor bounds F per layout" in err and "memsym estimate or fit" in err, err
        assert "unrecognized arguments" not in err, err
