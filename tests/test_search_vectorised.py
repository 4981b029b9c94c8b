"""The vectorised search: the array rules reject exactly what validate_layout rejects (constraint by
constraint, over many GPU counts and models), and every number search lists equals estimate --json."""
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from derivations import config as cfg
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


@pytest.mark.parametrize("extra", [[], ["--global-batch", "2048"]], ids=["paper", "1f1b"])
def test_every_number_search_lists_equals_estimate_json(capsys, extra):
    """Rows of search --json (the first, the last and a sample between) against estimate --json of the
    same configuration: every byte count equal, to the byte."""
    d = _json(capsys, ["search", "--gpus", "512", "--hbm", "80GiB", "--all-configurations", "--json"] + extra)
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
        for k in ("weights", "gradients", "optimizer", "activations", "total"):
            assert r[k] == e["bytes"][k], (r, k, e["bytes"][k])
        peak = Fraction(str(e["overheads"]["high"]["peak"]))
        assert r["peak"] == round(peak), (r, peak)
        assert r["headroom"] == round(d["hbm"] - peak)
        assert r["edp"] == e["layout"]["edp"] and r["sp"] == e["layout"]["sp"]
