"""The ``memsym`` process itself: a full or closed stdout, progress lines that stay one line each, and what
``--help`` and a new estimate import."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def memsym(args, importtime=False):
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + ["-m", "memsym"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_full_or_closed_stdout_is_one_line_or_nothing():
    """/dev/full as stdout is one line, exit 2; a closed stdout, exit 0."""
    with open("/dev/full", "w") as full_dev:
        p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--seq", "1034"], stdout=full_dev,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--seq", "1034"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert p.returncode == 0 and "Traceback" not in p.stderr


def test_report_progress_and_file_lines_stay_one_line_each(tmp_path):
    """An --out folder whose name holds a line break cannot split or forge a progress line or a
    written file's line: every stderr line is memsym's, every stdout line one file that exists."""
    out = tmp_path / "a\nmemsym report: done"
    r = memsym(["report", "--format", "md", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert err and all(line.startswith("memsym report: ") for line in err), err
    assert not any(line == "memsym report: done" for line in err)
    files = r.stdout.splitlines()
    assert files and all("\\n" in line for line in files)
    assert (out / "report.md").is_file()


def test_help_and_version_load_no_maths():
    """``memsym --help`` stays instant: no sympy or numpy imported."""
    for argv in (["--help"], ["--version"]):
        p = memsym(argv, importtime=True)
        assert p.returncode == 0
        loaded = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line}
        assert loaded and not loaded & {"sympy", "numpy"}, argv


def test_estimate_loads_no_sympy():
    """A new estimate is computed from the generated evaluators: no sympy."""
    p = memsym(["estimate", "--mbs", "3", "--json"], importtime=True)
    assert p.returncode == 0
    loaded = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "derivations.evaluate" in loaded and "sympy" not in loaded


#: The command lines that read a data file read only on demand (the others: at import, even under --help).
READ_BY = {"efficiency.toml": (["estimate", "--time", "--efficiency", "published"],)}


@pytest.mark.parametrize("name, old, new, said", [
    ("gpus.toml", 'total = "39.50GiB"', 'total = "abc"', "'abc'"),
    ("gpus.toml", 'total = "39.50GiB"', 'total = "0.3GiB"', "CUDA context"),
    ("gpus.toml", "nvlink_domain = 8", "nvlink_domain = 0", "nvlink_domain"),
    ("gpus.toml", 'total = "39.50GiB"', "", "lacks 'total'"),
    ("recipes.toml", "[paper]\ndescription", "[paper]\nwhat", "lacks 'description'"),
    ("switches.toml", "", "[[", "not a TOML data file"),
    ("limits.toml", None, None, "cannot read"),
    ("efficiency.toml", "tflops = 2672", "tflop = 2672", "lacks 'tflops'"),
    ("memsym/commands/options.toml", 'type = "unit_fraction"', 'type = "unit_fractionx"', "lacks 'unit_fractionx'"),
    ("memsym/commands/options.toml", '"*memory", "[time]"', '"*memoryx", "[time]"', "lacks 'memoryx'"),
    ("memsym/commands/options.toml", 'type = "unit_fraction"', "type = 5", "options.toml: "),
    ("derivations/families/deepseek/family.toml", 'short = "MLA + MoE"', 'shortz = "MLA + MoE"',
     "'shortz' is not a family's declaration"),
])
def test_a_damaged_package_data_file_is_one_line_exit_2(tmp_path, name, old, new, said):
    """A COPY of the package with one data file damaged (a value, a key, the syntax) or missing: ``memsym`` (even
    ``estimate --help``, whose parser reads the files) says what is wrong with which file on one line, exit 2."""
    for pkg in ("memsym", "derivations", "symbolic"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    data = tmp_path / name if "/" in name else tmp_path / "derivations" / "config" / name
    if old is None:
        data.unlink()
    else:
        text = data.read_text()
        assert old in text  # the tampering below changes the file
        data.write_text(text.replace(old, new, 1))
    for args in READ_BY.get(name, (["estimate", "--help"], ["estimate", "--gpu", "a100-40gb"])):
        r = subprocess.run([sys.executable, "-m", "memsym", *args], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"memsym {args[0]}: error: ") and Path(name).name in r.stderr and said in r.stderr, \
            r.stderr
