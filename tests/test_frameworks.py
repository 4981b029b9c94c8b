"""--framework (issue 43 item 3): search lists only the ZeRO stages and schedules a framework runs, estimate warns on
another. The limits, read from each framework's source: Megatron's distributed optimizer is ZeRO-1; DeepSpeed's
PipelineEngine asserts ZeRO < 2 with pipeline parallelism; torchtitan shards with FSDP2 (ZeRO-3)."""
import json

import pytest

from clirun import run

SEARCH = ["search", "--gpus", "256", "--gpu", "h800", "--global-batch", "1024", "--seq", "4096", "--json"]


def _rows(capsys, *extra):
    code, out, err = run(capsys, *SEARCH, *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name, allowed", [
    ("megatron", lambda z, pp: z in (0, 1)),
    ("torchtitan", lambda z, pp: z == 3),
    ("deepspeed", lambda z, pp: z in (0, 1) or pp == 1),
    ("megatron-fsdp", lambda z, pp: z in (1, 2, 3)),
])
def test_search_lists_only_what_the_framework_runs(capsys, name, allowed):
    every = _rows(capsys)["rows"]
    rows = _rows(capsys, "--framework", name)
    assert rows["rows"] and all(allowed(r["zero"], r["pp"]) for r in rows["rows"])
    # what it does run is what the unrestricted search found (no row invented, none of its kind lost)
    key = lambda r: (r["dp"], r["tp"], r["pp"], r["ep"], r["etp"], r["cp"], r["zero"], r["recompute"], r["mbs"])  # noqa
    theirs = {key(r) for r in rows["rows"]}
    assert theirs == {key(r) for r in every if allowed(r["zero"], r["pp"])} or len(every) >= 1000
    assert any(not allowed(r["zero"], r["pp"]) for r in every)  # the restriction removed something


def test_the_conventions_framework_is_the_default(capsys):
    rows = _rows(capsys, "--conventions", "mcore")["rows"]
    assert rows and all(r["zero"] in (0, 1) for r in rows)


def test_a_schedule_the_framework_does_not_run_is_refused(capsys):
    code, out, err = run(capsys, *SEARCH, "--framework", "megatron", "--schedule", "dualpipe")
    assert code == 2 and out == "" and "megatron runs the schedules 1f1b, interleaved" in err


def test_estimate_warns_on_a_combination_the_framework_does_not_run(capsys):
    code, out, err = run(capsys, "estimate", "--framework", "deepspeed", "--zero", "2")
    assert code == 0 and out and "warning: deepspeed runs ZeRO 0,1 with PP > 1, not ZeRO 2" in err
    code, out, err = run(capsys, "estimate", "--framework", "deepspeed", "--zero", "1")
    assert code == 0 and "warning" not in err
