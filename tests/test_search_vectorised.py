"""The vectorised search: the array rules reject exactly what validate_layout rejects (constraint by
constraint, over many GPU counts and models), and every number search lists equals estimate --json."""
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from derivations import config as cfg
from derivations.analyses import evaluation as E
from derivations.analyses import search as S
from memsym.cli import main

MODELS = [cfg.PRESETS[k] for k in ("deepseek-v3", "deepseek-v2", "deepseek-v2-lite")]
GPUS = [1, 2, 3, 6, 8, 12, 16, 24, 48, 64, 96, 100, 128, 240, 256, 360, 512, 720, 1000, 1024, 2048, 4096, 6144]


def _authority(model, lay, seqs, gpus_per_node):
    """validate_layout (and the node rule) on one candidate: the constraint it raises, or None."""
    if gpus_per_node and (gpus_per_node % lay.tp or gpus_per_node % lay.etp):
        return "tp-inside-node"
    try:
        for s in seqs:
            cfg.validate_layout(model, lay, s)
    except cfg.ConfigError as exc:
        return exc.constraint
    return None


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("seqs, gpus_per_node", [((4096,), None), ((4096,), 8), ((1000, 4096, 6), 4)])
def test_array_rules_reject_exactly_what_validate_layout_rejects(model, seqs, gpus_per_node):
    for gpus in GPUS:
        lay = S.lattice(model, gpus)
        why = S.rejections(model, lay, seqs, gpus_per_node)
        for i in range(len(why)):
            cand = cfg.Layout(**{k: int(lay[k][i]) for k in S.LAYOUT_FIELDS})
            assert why[i] == _authority(model, cand, seqs, gpus_per_node), (gpus, cand)


def test_array_rules_catch_candidates_outside_the_lattice():
    """Every rule fires on candidates the lattice never makes (EP not dividing N, EDP not an integer, ...)."""
    model = MODELS[0]
    rng = np.random.default_rng(3)
    n = 4000
    lay = {k: rng.choice([1, 2, 3, 4, 5, 8, 16, 24, 64, 96, 256], n).astype(np.int64) for k in S.LAYOUT_FIELDS}
    why = S.rejections(model, lay, (4096, 1536), 96)
    seen = Counter()
    for i in range(n):
        cand = cfg.Layout(**{k: int(lay[k][i]) for k in S.LAYOUT_FIELDS})
        assert why[i] == _authority(model, cand, (4096, 1536), 96)
        seen[why[i]] += 1
    assert {"tp-inside-node", "tp-divides-heads", "ep-divides-experts", "edp-integer", "pp-layers",
            "cp-divides-seq", "sp-divides-seq", None} <= set(seen)


def _loop_enumeration(model, gpus, seqs, gpus_per_node):
    """The enumeration as nested loops over the divisor lattice with validate_layout (the old path)."""
    from math import gcd
    layouts, rejected = [], Counter()
    for tp in S.divisors(gpus):
        for pp in S.divisors(gpus // tp):
            for cp in S.divisors(gpus // (tp * pp)):
                dp = gpus // (tp * pp * cp)
                for ep in S.divisors(gcd(model.N, dp * tp * cp)):
                    for etp in S.divisors(gcd(model.h_E, dp * tp * cp // ep)):
                        lay = cfg.Layout(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp)
                        why = _authority(model, lay, seqs, gpus_per_node)
                        if why:
                            rejected[why] += 1
                        else:
                            layouts.append(lay)
    return layouts, rejected


@pytest.mark.parametrize("gpus", [64, 720, 1024, 4096])
def test_enumeration_equals_the_loop_in_order_and_counts(gpus):
    model = MODELS[0]
    enum = S.enumerate_layouts(model, gpus, (4096, 8192), 8)
    layouts, rejected = _loop_enumeration(model, gpus, (4096, 8192), 8)
    assert enum.layouts == layouts
    assert enum.rejected == rejected
    assert enum.candidates == len(layouts) + sum(rejected.values())


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("extra", [[], ["--global-batch", "2048"], ["--attention", "eager"],
                                   ["--attention", "eager", "--global-batch", "2048"]],
                         ids=["paper", "1f1b", "paper-eager", "1f1b-eager"])
def test_every_number_search_lists_equals_estimate_json(capsys, extra):
    """Rows of search --json (the first, the last and a sample between) against estimate --json of the
    same configuration (the search's attention kernel, flash by default): every byte count equal, to the byte."""
    d = _json(capsys, ["search", "--gpus", "512", "--hbm", "80GiB", "--all-configurations", "--json"] + extra)
    assert d["attention"] == ("eager" if "eager" in extra else "flash")
    extra = [x for x in extra if x not in ("--attention", "eager")] + ["--attention", d["attention"]]
    rows = d["rows"]
    assert rows
    pick = sorted(set([0, len(rows) - 1] + list(np.random.default_rng(0).integers(0, len(rows), 14))))
    for i in pick:
        r = rows[i]
        argv = ["estimate", "--json", "--dp", str(r["dp"]), "--tp", str(r["tp"]), "--pp", str(r["pp"]),
                "--ep", str(r["ep"]), "--etp", str(r["etp"]), "--cp", str(r["cp"]), "--zero", str(r["zero"]),
                "--recompute", r["recompute"], "--mbs", str(r["mbs"]), "--seq", str(r["seq"]),
                "--stage", str(r["stage"])] + extra
        e = _json(capsys, argv)
        for k in ("weights", "gradients", "optimizer"):
            assert r[k] == e["bytes"][k], (r, k, e["bytes"][k])
        # the search judges the step's peak: its activations are the end of the forward's plus one backward's
        assert r["activations"] == e["bytes"]["activations"] + e["bytes"]["step"], r
        assert r["total"] == e["bytes"]["step_total"], r
        peak = Fraction(str(e["overheads"]["high"]["step_peak"]))
        assert r["peak"] == round(peak), (r, peak)
        assert r["headroom"] == round(d["hbm"] - peak)
        assert r["edp"] == e["layout"]["edp"] and r["sp"] == e["layout"]["sp"]


# the columns of the paper's view in their order (groups', components, total, ZeRO stage, policy, stage; then what
# search adds), which row formatting and --json follow
_COLUMN_ORDER = ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", "weights", "gradients",
                 "optimizer", "activations", "total", "zero", "recompute", "stage", "layout", "peak", "headroom",
                 "fits"]


@pytest.mark.parametrize("name, gpus, kw", [
    ("deepseek-v3", 64, {}),
    ("deepseek-v3", 1024, {"seqs": (4096, 8192), "mbs": (1, 2), "zeros": (1, 3), "recompute": "full,selective"}),
    ("deepseek-v2-lite", 48, {"seqs": (1000, 4096), "mbs": (1, 3, 4), "zeros": (0, 2), "recompute": "none"}),
], ids=["v3-64-every-choice", "v3-1024-seqs-mbs", "v2-lite-48"])
def test_rows_are_choices_by_layouts_by_groups(name, gpus, kw):
    """The paper's view lists (ZeRO stage, policy) choices x layouts x seqs x mbs, in order, each column one value
    per row; the components add up to the total (to the byte: the rows' rounding)."""
    res = E.configurations(cfg.PRESETS[name], gpus, 80 * 2 ** 30, **kw)
    c = {k: np.asarray(res.columns[k]) for k in res.columns}
    assert list(c) == _COLUMN_ORDER
    seqs, mbs, lay = kw.get("seqs", (4096,)), kw.get("mbs", (1, 2, 4)), res.enumeration.arrays
    n, n_l = len(c["total"]), len(res.enumeration)
    n_g = n_l * len(seqs) * len(mbs)  # rows of one (ZeRO stage, policy) choice
    assert n and n % n_g == 0 and all(len(v) == n for v in c.values())
    per_choice = {k: np.repeat(lay[k], n_g // n_l) for k in S.LAYOUT_FIELDS}
    per_choice.update(sp=per_choice["tp"], seq=np.tile(np.repeat(seqs, len(mbs)), n_l),
                      mbs=np.tile(mbs, n_l * len(seqs)))
    for k, v in per_choice.items():
        np.testing.assert_array_equal(c[k], np.tile(v, n // n_g), err_msg=k)
    for k in ("zero", "recompute"):
        assert (c[k].reshape(n // n_g, n_g) == c[k][::n_g, None]).all(), k
    parts = [c[k] for k in ("weights", "gradients", "optimizer", "activations")]
    np.testing.assert_array_equal(np.rint(sum(parts[1:], parts[0])), np.rint(c["total"]))  # to the byte


def test_an_empty_search_has_every_column():
    """With no (ZeRO, policy) choice: every column of a search, no row."""
    res = E.configurations(cfg.PRESETS["deepseek-v3"], 64, 80 * 2 ** 30, zeros=())
    assert list(res.columns) == _COLUMN_ORDER
    assert all(np.asarray(res.columns[k]).shape == (0,) for k in res.columns)
