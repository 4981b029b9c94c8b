"""One set of defaults (issue 43 item 2; derivations/config/defaults.py): with no run named every command answers the
paper's question (eager attention, the paper's Table 10 numbers), also against a budget (--hbm, --gpu); once a run
is named (--gpus, --global-batch, a launch file; search always) the attention kernel nobody set is the fused one,
as search's, so estimate and fit of a search row with only the row's own options give search's peak, time and
verdict; --conventions paper (or --recipe paper) is the paper's view anywhere.  The expectations are search's rows
(an independent evaluation: the generated kernels) and the paper's printed numbers, never the rule's own output."""
from __future__ import annotations

import contextlib
import io
import json
import random

import pytest

from clirun import run
from memsym.cli import main

#: the first-hour search of the issue: 1024 H800s, DeepSeek-V3's global batch and sequence length
RUN = ("--gpu", "h800", "--global-batch", "15360", "--seq", "4096")
LAYOUT = ("dp", "tp", "pp", "ep", "etp", "cp", "mbs", "zero", "recompute")
SEED = 43


def _json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def rows():
    """search's rows (every layout it lists) and the ones checked: its first 5 and 50 drawn with SEED."""
    out = io.StringIO()  # (module scope: the command line run without capsys)
    with contextlib.redirect_stdout(out):
        assert main(["search", "--gpus", "1024", *RUN, "--json"]) == 0
    listed = json.loads(out.getvalue())["rows"]
    return listed[:5] + random.Random(SEED).sample(listed[5:], 50)


def _options(row):
    return [x for k in LAYOUT for x in ("--" + k, str(row[k]))]


def test_estimate_of_a_search_row_is_the_row(capsys, rows):
    """estimate with the row's layout and the run's options (no --attention, no --schedule) gives the row's peak to
    the byte (search rounds to the nearest byte) and its step time within 1% (search's throughput is rounded)."""
    for i, r in enumerate(rows):
        e = _json(capsys, "estimate", *RUN, *_options(r), "--stage", str(r["stage"]), "--time")
        high = e["overheads"]["high"]
        peak = high.get("step_peak", high["peak"])
        assert abs(peak - r["peak"]) <= 0.5, (SEED, i, r, peak)
        assert abs(e["time"]["parts"]["step"] - r["step_time"]) <= 0.01 * r["step_time"], (SEED, i, r)


def test_fit_agrees_with_search_on_its_rows(capsys, rows):
    """fit --hbm 80GiB --solve mbs at a listed row's layout: the row's b fits (search listed it), at search's peak."""
    for r in rows[:2] + rows[-1:]:
        f = _json(capsys, "fit", "--hbm", "80GiB", "--solve", "mbs", "--global-batch", "15360", "--seq", "4096",
                  *_options(r))
        assert f["mbs"] >= r["mbs"] and f["fits"], (r, f["mbs"])
        if f["mbs"] == r["mbs"]:
            assert abs(f["check"]["value"]["peak"] - r["peak"]) <= 0.5, r


def test_no_run_named_is_the_papers_view(capsys):
    """A bare estimate is the paper's (Table 10's 24,671,158,272 bytes of activations at stage 1, eager), and says
    so; search, fit and estimate under --conventions paper or --recipe paper keep eager attention with a run named."""
    for argv in (("estimate",), ("estimate", "--gpu", "h800"), ("estimate", "--hbm", "80GiB")):
        e = _json(capsys, *argv)
        assert e["bytes"]["activations"] == 24671158272, argv
        assert e["defaults"] == {"view": "paper", "named_by": [], "set": {"attention": "eager"}}, argv
    for argv in (("estimate", "--gpu", "h800", "--conventions", "paper"), ("estimate", "--gpus", "1024", "--recipe",
                                                                           "paper"),
                 ("estimate", "--global-batch", "1024", "--attention", "eager")):
        got = _json(capsys, *argv)
        assert got["conventions"]["attention"] == "eager", argv
        assert got["defaults"]["set"] == {}, argv
    s = _json(capsys, "search", "--gpus", "64", "--hbm", "80GiB", "--top", "1", "--conventions", "paper")
    assert s["attention"] == "eager"


@pytest.mark.parametrize("argv, named", [
    (("estimate", "--gpus", "1024"), ["--gpus"]),
    (("estimate", "--gpu", "h800", "--gpus", "1024"), ["--gpus"]),
    (("estimate", "--global-batch", "1024"), ["--global-batch"]),
    (("sensitivity", "--wrt", "s", "--gpus", "1024"), ["--gpus"]),
    (("fit", "--hbm", "80GiB", "--global-batch", "4096", "--schedule", "1f1b"), ["--global-batch"]),
])
def test_a_named_run_takes_flash_attention_and_says_so(capsys, argv, named):
    got = _json(capsys, *argv)
    assert got["defaults"] == {"view": "run", "named_by": named, "set": {"attention": "flash"}}
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert out.splitlines()[-1] == (f"defaults: attention flash (a run is named: {', '.join(named)}; --conventions "
                                    f"paper for the paper's view)")


def test_bare_estimate_flash_is_flash(capsys):
    """With a run named, the activations are those of --attention flash typed (the one kernel: no second path)."""
    named = _json(capsys, "estimate", "--gpus", "1024")  # DP = 1024 / (TP 2 PP 16): the paper's layout
    typed = _json(capsys, "estimate", "--attention", "flash")
    assert named["bytes"] == typed["bytes"]
    assert named["bytes"]["activations"] < _json(capsys, "estimate")["bytes"]["activations"]


def test_search_text_says_its_defaults(capsys):
    code, out, _ = run(capsys, "search", "--gpus", "64", "--hbm", "80GiB", "--top", "1")
    assert code == 0
    assert out.splitlines()[-1].startswith("defaults: attention flash (a run is named: --gpus;")
