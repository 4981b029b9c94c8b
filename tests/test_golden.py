"""Every kept command line prints, byte for byte, what it printed when it was recorded
(tests/golden/outputs.jsonl, made by ``python -m tests.golden.commands record`` before the
"Architecture II" restructuring): a behaviour-preserving change keeps all 231 outputs.  A change
meant to alter numbers regenerates the file and says why in its commit."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.golden.commands import OUTPUTS, ROOT, TEXT_OUTPUTS, commands, run, text_commands

RECORDED = [json.loads(line) for line in OUTPUTS.read_text(encoding="utf-8").splitlines()]
RECORDED_TEXT = [json.loads(line) for line in TEXT_OUTPUTS.read_text(encoding="utf-8").splitlines()]


def test_the_recorded_command_lines_are_the_commands():
    assert [r["argv"] for r in RECORDED] == commands() and len(RECORDED) >= 200
    assert [r["argv"] for r in RECORDED_TEXT] == text_commands()


@pytest.mark.parametrize("rec", RECORDED, ids=[" ".join(r["argv"])[:80] for r in RECORDED])
def test_output_is_as_recorded(rec, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert run(rec["argv"]) == (rec["rc"], rec["stdout"], rec["stderr"])


@pytest.mark.parametrize("rec", RECORDED_TEXT, ids=[" ".join(r["argv"])[:80] for r in RECORDED_TEXT])
def test_text_output_is_as_recorded(rec, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert run(rec["argv"]) == (rec["rc"], rec["stdout"], rec["stderr"])


def test_the_memsym_process_prints_the_same():
    """A sample through the ``memsym`` process itself (its exit, stdout and stderr)."""
    for rec in RECORDED[::23]:
        p = subprocess.run([sys.executable, "-m", "memsym", *rec["argv"]], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert (p.returncode, p.stdout, p.stderr) == (rec["rc"], rec["stdout"], rec["stderr"]), rec["argv"]
