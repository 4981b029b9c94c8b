"""The adversarial review's reproductions (issue 44): every hostile input is one line and exit 2, or the right
output, never a traceback; files keep the user's modes."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import run

ROOT = Path(__file__).resolve().parent.parent


def _one_line_refusal(capsys, *argv, says=""):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "Traceback" not in err and says in err, err
    return err


@pytest.mark.parametrize("argv", [["estimate", "--from-torchtitan"], ["runs", "--data"], ["reproduce", "--data"]])
def test_toml_nested_600_deep_is_one_line(tmp_path, capsys, argv):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 600 + "]" * 600 + "\n")
    _one_line_refusal(capsys, *argv, str(path), says="nested too deeply")


@pytest.mark.parametrize("argv", [["estimate", "--from-torchtitan"], ["runs", "--data"], ["reproduce", "--data"]])
def test_a_5000_digit_integer_in_toml_is_one_line(tmp_path, capsys, argv):
    path = tmp_path / "big.toml"
    path.write_text("[job]\nx = " + "9" * 5000 + "\n")
    _one_line_refusal(capsys, *argv, str(path), says=str(path))


@pytest.mark.parametrize("digits", [40, 5000])
def test_a_long_integer_below_the_conversion_limit_is_refused_too(tmp_path, capsys, digits):
    """tomllib converts 4,000 digits without complaint: the bound is memsym's (no job config field has 40)."""
    path = tmp_path / "big.toml"
    path.write_text("[parallelism]\ndata_parallel_shard_degree = " + "9" * digits + "\n")
    _one_line_refusal(capsys, "estimate", "--from-torchtitan", str(path), says=str(path))


def test_a_5000_digit_integer_in_yaml_is_one_line(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("MODEL_ARGS:\n  --num-layers: " + "9" * 5000 + "\n")
    _one_line_refusal(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8", says="not a model_config")


def test_moe_layer_freq_with_350_nested_parentheses_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text('MODEL_ARGS:\n  --num-layers: 4\n  --moe-layer-freq: "' + "(" * 350 + "[1]*4" + ")" * 350 + '"\n')
    err = _one_line_refusal(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8", says="nested more than")
    assert len(err) < 300  # the 700-character expression is not echoed whole


@pytest.mark.parametrize("command", ["reproduce", "runs"])
def test_a_binary_data_file_is_one_line(tmp_path, capsys, command):
    path = tmp_path / "bin.toml"
    path.write_bytes(bytes(range(256)) * 4)
    _one_line_refusal(capsys, command, "--data", str(path), says="not UTF-8")


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--latex"]])
def test_verify_of_a_formula_past_a_float_is_exact(capsys, fmt):
    """2^1100 b bytes: the difference is printed exactly (no OverflowError converting it to a float)."""
    code, out, err = run(capsys, "verify", "2^1100*b", "--against", "act.mla.layer", *fmt)
    assert code == 1 and "Traceback" not in err and out, err
    if fmt == ["--json"]:
        assert '"gib_at_paper": "-' in out  # beyond a float: the exact p/q text


def test_fixed_point_text_is_exact_beyond_a_float_and_floats_within():
    from fractions import Fraction

    from symbolic.exact import fixed, fmt_gib
    assert fixed(Fraction(2 ** 1100 + 1, 2), 1) == f"{2 ** 1099:,}.5"
    assert fixed(Fraction(-(10 ** 400) - 1, 200), 2) == "-" + f"{10 ** 398 // 2:,}.00"  # half to even: .005 -> .00
    assert fmt_gib(3 * 2 ** 29) == "1.50" and fixed(Fraction(-1, 1000), 2) == "-0.00"  # as float formatting prints


def test_outputs_take_the_umask_and_keep_an_existing_mode(tmp_path, capsys):
    csv = tmp_path / "rows.csv"
    old = os.umask(0o077)
    try:
        assert run(capsys, "search", "--gpus", "64", "--csv", str(csv))[0] == 0
        assert stat.S_IMODE(csv.stat().st_mode) == 0o600
        csv.chmod(0o640)
        os.umask(0o022)
        assert run(capsys, "search", "--gpus", "64", "--csv", str(csv))[0] == 0
        assert stat.S_IMODE(csv.stat().st_mode) == 0o640  # written again: its mode kept
    finally:
        os.umask(old)


def test_out_as_a_dangling_link_is_refused_before_any_work(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" / "x")
    p = subprocess.run([sys.executable, "-m", "memsym", "reproduce", "--out", str(link)], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2 and p.stdout == "" and "symbolic link to nothing" in p.stderr, p.stderr
    assert "report:" not in p.stderr  # refused before the report began (no progress line)


def test_a_launch_file_swapped_for_a_fifo_after_its_check_never_blocks(tmp_path, monkeypatch):
    """The review swapped the file for a FIFO between the check and the open (2 of 80 runs hung): the stat is made
    to see a regular file here, so only the non-blocking open and the fstat after it stand between the read and a
    FIFO no one writes to."""
    from derivations.config import launch
    from symbolic.errors import ConfigError
    fifo = tmp_path / "run.sh"
    os.mkfifo(fifo)
    regular = tmp_path / "regular"
    regular.write_text("x")
    real_stat = os.stat
    monkeypatch.setattr(launch.os, "stat", lambda p, *a, **k: real_stat(regular) if str(p) == str(fifo)
                        else real_stat(p, *a, **k))
    with pytest.raises(ConfigError, match="not a regular file"):
        launch.read_text(str(fifo))


def test_a_fifo_named_as_a_launch_file_is_one_line(tmp_path, capsys):
    fifo = tmp_path / "run.sh"
    os.mkfifo(fifo)
    _one_line_refusal(capsys, "estimate", "--from-megatron", str(fifo), "--gpus", "8", says="not a regular file")


@pytest.mark.parametrize("value", ["0x" + "f" * 6000, "0b" + "1" * 20000, "1" + ":59" * 3000])
def test_a_yaml_integer_in_another_base_is_one_line(tmp_path, capsys, value):
    """PyYAML reads hex, binary and base-60 integers whole (no digit limit): str() of one raised ValueError."""
    path = tmp_path / "m.yaml"
    path.write_text(f"MODEL_ARGS:\n  --num-layers: 4\n  --distributed-timeout-minutes: {value}\n")
    _one_line_refusal(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8", says="bits")


def test_reproduce_data_without_entries_is_refused(tmp_path, capsys):
    path = tmp_path / "junk.toml"
    path.write_text("x = 1\n")
    _one_line_refusal(capsys, "reproduce", "--data", str(path), says="no [[entry]]")


def test_the_api_gives_the_time_as_json_does(capsys):
    import json

    import memsym
    code, out, _ = run(capsys, "estimate", "--time", "--gpu", "h800", "--global-batch", "1024", "--json")
    assert memsym.estimate(time=True, gpu="h800", global_batch=1024).to_dict() == json.loads(out)
