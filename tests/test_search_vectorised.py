"""The vectorised search: the array rules reject exactly what validate_layout rejects (constraint by
constraint, over many GPU counts and models), and every number search lists equals estimate --json."""
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from derivations import config as cfg
from derivations.analyses import columns as C
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


# the columns of the paper's view in their order before they were lazy (groups', components, total, ZeRO
# stage, policy, stage; then what search adds), which row formatting and --json follow
_COLUMN_ORDER = ["dp", "tp", "pp", "ep", "etp", "cp", "sp", "seq", "mbs", "edp", "weights", "gradients",
                 "optimizer", "activations", "total", "zero", "recompute", "stage", "peak", "headroom", "fits"]


def _indices(n, n_g, seed):
    """Row index arrays of a result of n rows (choices of n_g rows each): empty, the first and last row,
    each choice's boundary rows, and random rows (seeded) with repeats, in no order."""
    rng = np.random.default_rng(seed)
    bounds = [r for c in range(0, n, n_g or 1) for r in (c - 1, c, c + n_g - 1, c + n_g) if 0 <= r < n]
    rand = rng.integers(0, n, 64)
    return [np.zeros(0, dtype=np.int64), np.array([0]), np.array([n - 1]), np.array([n - 1, 0, n - 1, 0]),
            rng.permutation(np.array(bounds + [0, n - 1] + list(rand[:8]), dtype=np.int64)),
            np.concatenate([rand, rand[::-1]]), rand.tolist()]


def _other_indices(n, n_g, seed):
    """Indices of every other kind numpy reads for a 1-D array of n rows: negative (arrays, lists and
    0-d), a single integer (Python, numpy, negative), boolean masks (array and list), 2-D and unsigned
    arrays, an empty list; and out of range (either end, scalar and array) or a mask of another length,
    which numpy refuses with an IndexError."""
    rng = np.random.default_rng(seed)
    neg = rng.integers(-n, 0, 32)
    mask = rng.random(n) < 0.25
    return [neg, neg.tolist(), np.concatenate([neg, -neg - 1]), np.array([-1, -n, -n_g, -n_g - 1]) % n - n,
            np.array([-1, 0, n - 1], dtype=np.int32), np.array(-1), -1, -n, 0, n - 1, n // 2, np.int64(n - 1),
            np.int32(-2), mask, mask.tolist(), np.zeros(n, bool), np.ones(n, bool),
            np.array([[0, -1], [n - 1, n // 2]]), np.array([0, n - 1], dtype=np.uint32), [],
            n, -n - 1, np.int64(n), np.array([0, n]), np.array([-n - 1, 0]), [n + 7], np.zeros(n + 1, bool),
            np.ones(n - 1, bool).tolist()]


def _same_or_both_refuse(got, want):
    """got() equals want() (values, dtype, shape, a scalar for a scalar), or both raise an IndexError."""
    try:
        w = want()
    except IndexError:
        with pytest.raises(IndexError):
            got()
        return
    g = got()
    assert type(g) is type(w) and np.shape(g) == np.shape(w), (type(g), type(w), np.shape(g), np.shape(w))
    np.testing.assert_array_equal(g, w, strict=True)


@pytest.mark.parametrize("name, gpus, kw", [
    ("deepseek-v3", 64, {}),
    ("deepseek-v3", 1024, {"seqs": (4096, 8192), "mbs": (1, 2), "zeros": (1, 3), "recompute": "full,selective"}),
    ("deepseek-v3", 256, {"seqs": (8192,), "mbs": (2,), "zeros": (3, 0), "recompute": "selective,none"}),
    ("deepseek-v2-lite", 48, {"seqs": (1000, 4096), "mbs": (1, 3, 4), "zeros": (0, 2), "recompute": "none"}),
    ("deepseek-v2-lite", 16, {"seqs": (2048,), "mbs": (1,), "zeros": (2,), "recompute": "full"}),
], ids=["v3-64-every-choice", "v3-1024-seqs-mbs", "v3-256-one-seq-mbs", "v2-lite-48", "v2-lite-16-one-seq-mbs"])
def test_lazy_columns_take_equals_the_built_columns(name, gpus, kw):
    """Columns.take (and columns.take) of any rows of any column equals the column built whole, in
    values and dtype, before and after the column is built; the columns keep their order.  The other
    result's columns are all built first, so the two paths never share a built array."""
    model = cfg.PRESETS[name]
    res = E.configurations(model, gpus, 80 * 2 ** 30, **kw)
    fresh = E.configurations(model, gpus, 80 * 2 ** 30, **kw)
    built = {k: np.asarray(fresh.columns[k]) for k in fresh.columns}
    c = res.columns
    assert isinstance(c, C.Columns)
    assert list(c) == list(built) == _COLUMN_ORDER
    seqs, mbs, lay = kw.get("seqs", (4096,)), kw.get("mbs", (1, 2, 4)), res.enumeration.arrays
    n, n_l = len(built["total"]), len(res.enumeration)
    n_g = n_l * len(seqs) * len(mbs)  # rows of one (ZeRO stage, policy) choice
    assert n and n % n_g == 0 and all(len(v) == n for v in built.values())
    # rows: choices x layouts x seqs x mbs, in order (written here without the code's index arithmetic)
    per_choice = {k: np.repeat(lay[k], n_g // n_l) for k in S.LAYOUT_FIELDS}
    per_choice.update(sp=per_choice["tp"], seq=np.tile(np.repeat(seqs, len(mbs)), n_l),
                      mbs=np.tile(mbs, n_l * len(seqs)))
    for k, v in per_choice.items():
        np.testing.assert_array_equal(built[k], np.tile(v, n // n_g), err_msg=k)
    for k in ("zero", "recompute"):
        assert (built[k].reshape(n // n_g, n_g) == built[k][::n_g, None]).all(), k
    # the components are read at the composition whose sum is the (eagerly built) total, added in order
    parts = [built[k] for k in ("weights", "gradients", "optimizer", "activations")]
    np.testing.assert_array_equal(sum(parts[1:], parts[0]), built["total"], strict=True)
    index_sets = _indices(n, n_g, gpus)
    for k in _COLUMN_ORDER:  # every column read by rows while still lazy
        for idx in index_sets:
            for got in (c.take(k, idx), C.take(c, k, idx)):
                want = built[k][np.asarray(idx, dtype=np.int64)]
                assert got.dtype == want.dtype, (k, got.dtype, want.dtype)
                np.testing.assert_array_equal(got, want, strict=True, err_msg=k)
    others = _other_indices(n, n_g, gpus)
    for k in _COLUMN_ORDER:  # negative, scalar, boolean and out-of-range indices: numpy's answer, or its IndexError
        for idx in others:
            for f in (c.take, lambda k, idx: C.take(c, k, idx)):
                _same_or_both_refuse(lambda: f(k, idx), lambda: built[k][idx])
    assert list(c) == _COLUMN_ORDER  # take builds nothing into the order
    assert all(k not in c._arrays for k in c._lazy), "take built a lazy column"
    for k in _COLUMN_ORDER:  # then built whole: the same array as the other result's, and take agrees still
        np.testing.assert_array_equal(c[k], built[k], strict=True, err_msg=k)
        idx = index_sets[-2]
        np.testing.assert_array_equal(c.take(k, idx), built[k][idx], strict=True, err_msg=k)
        for idx in others:
            _same_or_both_refuse(lambda: c.take(k, idx), lambda: built[k][idx])
    assert list(c) == list(fresh.columns) == _COLUMN_ORDER


def test_take_of_a_scheduled_search_reads_its_columns():
    """Under a pipeline schedule the columns are plain arrays: columns.take is indexing."""
    model = cfg.PRESETS["deepseek-v2-lite"]
    res = E.configurations(model, 32, 80 * 2 ** 30, schedule="1f1b", microbatches=8, mbs=(1, 2), zeros=(1,))
    c = res.columns
    n = len(c["total"])
    assert n
    for k in c:
        for idx in _indices(n, n, 7):
            np.testing.assert_array_equal(C.take(c, k, idx), np.asarray(c[k])[np.asarray(idx, np.int64)],
                                          strict=True, err_msg=k)


def test_lazy_columns_of_an_empty_search_keep_their_dtypes():
    """With no (ZeRO, policy) choice: every column of a search (the components too), no row, the same
    dtype read by take or built, as a search with choices has; any row is out of range."""
    res = E.configurations(cfg.PRESETS["deepseek-v3"], 64, 80 * 2 ** 30, zeros=())
    some = E.configurations(cfg.PRESETS["deepseek-v3"], 64, 80 * 2 ** 30, zeros=(1,), recompute="full")
    assert list(res.columns) == _COLUMN_ORDER
    empty = np.zeros(0, dtype=np.int64)
    for k in res.columns:
        for idx in (empty, [], np.zeros(0, bool)):
            took = res.columns.take(k, idx)
            assert took.shape == (0,) and took.dtype == some.columns.take(k, empty).dtype, k
        for idx in (0, -1, np.array([0]), np.ones(1, bool)):
            with pytest.raises(IndexError):
                res.columns.take(k, idx)
    for k in res.columns:
        built = np.asarray(res.columns[k])
        assert built.shape == (0,) and built.dtype == np.asarray(some.columns[k]).dtype, k
