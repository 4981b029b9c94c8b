"""Multi-file outputs all or nothing (symbolic.files.write_tree): a staging folder
beside the target, renamed into place; after a full disk, a permission error or Ctrl-C the
target holds its previous files (or does not exist) and the message names the file and the
cause.  Ctrl-C exits 130 with one line."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from symbolic import files
from symbolic.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
NEW = {"report.md": "new md", "report.tex": "new tex", "report.html": b"new html"}


def snapshot(d: Path):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.exists() else None


def leftovers(parent: Path):
    return [p.name for p in parent.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


def test_a_new_folder_is_renamed_into_place(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    written = files.write_tree(out, NEW)
    assert [p.name for p in written] == sorted(NEW)
    assert snapshot(out) == {"report.html": b"new html", "report.md": b"new md", "report.tex": b"new tex"}
    assert not leftovers(out.parent)


def test_an_existing_folder_keeps_its_other_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old")
    (out / "notes.txt").write_text("mine")
    (out / "report.log").write_text("stale")
    files.write_tree(out, NEW, remove=("report.log",))
    assert snapshot(out) == {"notes.txt": b"mine", "report.html": b"new html", "report.md": b"new md",
                             "report.tex": b"new tex"}
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_while_staging_leaves_the_target_unchanged(tmp_path, monkeypatch, existing):
    out = tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "report.md").write_text("old")
    before = snapshot(out)
    calls = {"n": 0}
    real = os.fsync

    def full(fd):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ConfigError) as exc:
        files.write_tree(out, NEW)
    assert "report.md" in str(exc.value) and "No space left on device" in str(exc.value)
    assert "unchanged" in str(exc.value)
    assert snapshot(out) == before and not leftovers(tmp_path)


def test_ctrl_c_while_staging_leaves_the_target_unchanged(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        files.write_tree(out, NEW)
    assert snapshot(out) == {"report.md": b"old"} and not leftovers(tmp_path)


def test_a_failed_rename_puts_the_previous_set_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    for name in NEW:
        (out / name).write_text("old " + name)
    before = snapshot(out)
    real, calls = os.rename, {"n": 0}

    def flaky(src, dst):
        calls["n"] += 1
        if calls["n"] == 4:  # old md set aside, new md in, old tex set aside, then the new tex fails
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(dst))
        return real(src, dst)
    monkeypatch.setattr(os, "rename", flaky)
    with pytest.raises(ConfigError) as exc:
        files.write_tree(out, NEW)
    assert "Permission denied" in str(exc.value)
    assert snapshot(out) == before and not leftovers(tmp_path)


def test_a_directory_in_the_way_is_named(tmp_path):
    out = tmp_path / "out"
    (out / "report.md").mkdir(parents=True)
    with pytest.raises(ConfigError, match="report.md: it is a directory"):
        files.write_tree(out, NEW)
    assert (out / "report.md").is_dir() and not leftovers(tmp_path)


def test_an_unwritable_parent_is_reported(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        with pytest.raises((ConfigError, PermissionError)):
            files.write_tree(parent / "out", NEW)
    finally:
        parent.chmod(0o755)


@pytest.fixture()
def tiny_tmpfs(tmp_path):
    """A 1 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_report_on_a_full_tmpfs_names_the_file_and_leaves_the_folder_unchanged(tiny_tmpfs):
    out = tiny_tmpfs / "out"
    out.mkdir()
    (out / "report.md").write_text("the previous report")
    with open(tiny_tmpfs / "filler", "wb") as fh:  # leave about 200 KiB: the report's files need more
        fh.write(b"\0" * (800 * 1024))
    before = snapshot(out)
    p = subprocess.run([sys.executable, "-m", "memsym", "report", "--out", str(out), "--format", "tex,md,html"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert p.returncode == 2, p.stderr
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(out) in errors[0], p.stderr
    assert "Traceback" not in p.stderr
    assert snapshot(out) == before and not leftovers(tiny_tmpfs)


def test_ctrl_c_exits_130_with_one_line_and_no_partial_output(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "memsym", "report", "--out", str(out), "--format", "tex,md"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(1.5)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=30)
    if p.returncode == 0:
        pytest.skip("the report finished before the interrupt")
    lines = [ln for ln in err.splitlines() if not ln.startswith("memsym report: ")]
    assert p.returncode == 130 and lines == ["memsym: interrupted"], err
    assert not out.exists() and not leftovers(tmp_path)


def test_report_without_out_writes_under_the_current_directory(tmp_path, monkeypatch):
    from symbolic.resources import build_dir
    monkeypatch.chdir(tmp_path)
    assert build_dir() == tmp_path / "memsym-report"
    assert ROOT not in build_dir().parents


def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path):
    """The output is replaced whole (written beside and renamed): a symlink, a FIFO or a device at the path would be
    replaced, not written to: refused on one line, nothing changed (a review wrote --csv /dev/full as root)."""
    import subprocess
    import sys
    target = tmp_path / "target.csv"
    target.write_text("kept\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    for path in (link, fifo):
        p = subprocess.run([sys.executable, "-m", "memsym", "search", "--gpus", "64", "--csv", str(path)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "not a regular file" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert link.is_symlink() and target.read_text() == "kept\n" and fifo.is_fifo()


@pytest.mark.parametrize("argv", [("page", "--out", ""), ("report", "--out", "", "--format", "md"),
                                  ("reproduce", "--out", "")])
def test_an_empty_out_is_refused_before_anything_is_written(capsys, tmp_path, monkeypatch, argv):
    """``--out ''`` would name the current folder: refused on one line (the review found report.md and the page
    written into the folder memsym ran from)."""
    from clirun import run
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and "empty path" in err and len(err.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
