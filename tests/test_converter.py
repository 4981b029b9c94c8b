"""The helper processes converting notebooks to HTML (memsym/report/converter.py): the same HTML, and
no helper outlives the report or stalls it, however it or the helpers end.

Each test would fail on one defect of the earlier design (one queue shared by both helpers, no
parent-death signal): a report killed with SIGTERM left both helpers running; the second helper
outlived the first when that one was killed at close; a dead helper stalled the report until every
notebook's timeout.  Waits below are guards that turn a hang into a failure, never timings.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("nbconvert")   # the report extra
if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
    pytest.skip("the helpers run on Linux with two cores or more", allow_module_level=True)

from memsym import report as rp                          # noqa: E402
from memsym.report import converter as conv              # noqa: E402
from memsym.report import notebook as nbm                # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUARD = 60  # seconds before a wait that should end at once counts as a hang


def _gone(pid: int) -> bool:
    """The process ended (no such process, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_gone(pids, guard=GUARD) -> list:
    """The pids still running after ``guard`` seconds (empty when they all ended)."""
    end = time.monotonic() + guard
    while time.monotonic() < end and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _children(pid: int) -> list:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _descendants(pid: int) -> list:
    out, todo = [], [pid]
    while todo:
        for c in _children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def _both_helpers(converter) -> list:
    """The two helpers' pids, once the second has said hello (the first forks it after warming up)."""
    end = time.monotonic() + GUARD
    while len(converter.pids()) < conv.WORKERS and time.monotonic() < end:
        time.sleep(0.05)
    assert len(converter.pids()) == conv.WORKERS, "the second helper never started"
    return converter.pids()


@pytest.fixture(scope="module")
def computed():
    ctx = rp.Context.create()
    plan = rp.outline_report(ctx)
    return ctx, plan, rp.complete_report(ctx, plan)


@pytest.fixture(scope="module")
def notebooks(computed):
    ctx, plan, done = computed
    return [(nbm.stem(o), nbm.build_notebook(ctx, plan, o, computed=d.blocks))
            for o, d in zip(plan.sections, done.sections) if o.notebook]


def test_the_helpers_give_the_same_html(computed, notebooks):
    """The notebooks as the report sends them (built without nbformat, unchecked, as JSON) convert to
    the HTML of the notebooks nbformat builds and checks, byte for byte."""
    ctx, plan, done = computed
    sent = [nbm.build_notebook(ctx, plan, o, computed=d.blocks, sent=True)
            for o, d in zip(plan.sections, done.sections) if o.notebook]
    converter = conv.Converter.start()
    assert converter is not None
    try:
        pending = [(stem, nb, converter.submit(light, stem)) for (stem, nb), light in zip(notebooks, sent)]
        for stem, nb, html in pending:
            assert html.get(timeout=300) == nbm.to_html(nb, stem), stem
        assert len(converter.pids()) == conv.WORKERS
    finally:
        converter.close()
    assert not _wait_gone(converter.pids())


def test_killing_the_first_helper_takes_the_second_along():
    """The second helper is the first's child: a parent-death signal ends it with the first."""
    converter = conv.Converter.start()
    try:
        first, second = _both_helpers(converter)
        os.kill(first, signal.SIGKILL)
        assert not _wait_gone([first, second]), "a helper outlived the one that forked it"
    finally:
        converter.close()


def test_a_dead_helper_is_noticed_and_its_notebooks_come_back(notebooks):
    """Both helpers killed: waiting (with no timeout at all) raises at once, so the caller converts."""
    converter = conv.Converter.start()
    try:
        for pid in _both_helpers(converter):
            os.kill(pid, signal.SIGKILL)
        stem, nb = notebooks[0]
        pending = converter.submit(nb, stem)
        outcome = []
        waiter = threading.Thread(target=lambda: outcome.append(_outcome(pending)), daemon=True)
        waiter.start()
        waiter.join(GUARD)
        assert outcome == [RuntimeError], "a dead helper stalled the wait"
    finally:
        converter.close()


def _outcome(pending):
    try:
        pending.get(timeout=None)
        return "html"
    except Exception as exc:  # what publishing._notebooks_html falls back on
        return type(exc)


def test_the_report_falls_back_when_a_helper_dies(notebooks, tmp_path, monkeypatch):
    """publish with helpers killed mid-way writes the same files, converting here what they held."""
    from memsym.report import publishing
    ctx = rp.Context.create()
    monkeypatch.setenv("MEMSYM_CACHE", "0")
    rp.publish(ctx, tmp_path / "a", ("html",))
    converter = conv.Converter.start()
    first, second = _both_helpers(converter)
    os.kill(second, signal.SIGKILL)
    monkeypatch.setattr(publishing, "CONVERT_TIMEOUT", 10 ** 6)  # a stall would show as the guard below
    done = []
    t = threading.Thread(target=lambda: done.append(rp.publish(ctx, tmp_path / "b", ("html",), converter=converter)),
                         daemon=True)
    t.start()
    t.join(GUARD * 5)
    assert done, "the report stalled on a dead helper"
    for f in sorted((tmp_path / "a").iterdir()):
        assert (tmp_path / "b" / f.name).read_bytes() == f.read_bytes(), f.name
    assert not _wait_gone([first, second])


def test_close_ends_both_helpers_even_when_the_first_is_stopped():
    """close() after the first helper stopped (SIGSTOP: it cannot end itself) kills it, and the
    second dies with it."""
    converter = conv.Converter.start()
    first, second = _both_helpers(converter)
    os.kill(first, signal.SIGSTOP)
    converter.close()
    assert not _wait_gone([first, second]), "close left a helper behind"


_REPORT = textwrap.dedent("""
    import sys, time
    from memsym.report.converter import Converter
    converter = Converter.start()
    end = time.monotonic() + 60
    while len(converter.pids()) < 2 and time.monotonic() < end:
        time.sleep(0.05)
    print(" ".join(map(str, converter.pids())), flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_report_process_that_is_killed_takes_its_helpers_along(sig):
    """SIGTERM (the handler kills the helpers) or SIGKILL (no handler runs: the parent-death signal)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _REPORT], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 2
        proc.send_signal(sig)
        assert proc.wait(GUARD) == -sig
        assert not _wait_gone(pids), "a helper outlived the report"
    finally:
        proc.kill()
        proc.wait()


def test_memsym_report_killed_with_sigterm_leaves_no_process(tmp_path):
    """The command line itself: SIGTERM while the helpers work, then nothing of the report runs."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MEMSYM_CACHE="0", HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "memsym", "report", "--format", "html", "--out",
                             str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    try:
        for line in proc.stderr:          # the helpers are up (and working) once sections are computed
            if "section" in line:
                break
        end = time.monotonic() + GUARD
        helpers = []
        while len(helpers) < 2 and time.monotonic() < end:
            helpers = _descendants(proc.pid)
            time.sleep(0.05)
        assert len(helpers) == 2, helpers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GUARD) == -signal.SIGTERM
        assert not _wait_gone(helpers), "a helper outlived the report"
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "out").exists()


def test_a_notebook_the_schema_refuses_is_checked_where_it_is_converted(notebooks):
    """The report's process sends its notebooks unchecked: a helper checks each against nbformat's
    schema and refuses one that fails (the caller then converts it, checking it: the error shows)."""
    import copy
    stem, nb = notebooks[0]
    bad = copy.deepcopy(nb)
    bad.cells[0]["cell_type"] = "bogus"
    converter = conv.Converter.start()
    try:
        with pytest.raises(RuntimeError):
            converter.submit(bad, "bad").get(timeout=GUARD * 5)
        assert converter.submit(nb, stem).get(timeout=GUARD * 5) == nbm.to_html(nb, stem)
    finally:
        converter.close()
    with pytest.raises(Exception, match="bogus|valid"):
        nbm.checked(bad)


def test_the_report_process_loads_no_notebook_package_for_html(tmp_path):
    """nbformat, nbconvert (and jsonschema, IPython) load in the helpers only: the report's own process
    builds the notebooks as plain nodes and sends them as JSON."""
    code = textwrap.dedent("""
        import sys
        from memsym.cli import main
        rc = main(["report", "--format", "tex,md,html", "--out", sys.argv[1]])
        print("loaded:", rc, *sorted(m for m in ("nbformat", "nbconvert", "jsonschema", "IPython") if m in sys.modules))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MEMSYM_CACHE="0", HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert out.stdout.splitlines()[-1].split() == ["loaded:", "0"], out.stdout + out.stderr
