"""The ``memsym`` process itself: a full or closed stdout, progress lines that stay one line each, and what
``--help`` and a new estimate import."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
