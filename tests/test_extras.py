"""Optional extras: memsym[report] (notebooks: nbformat, nbclient, nbconvert, ipykernel) and
memsym[plot] (matplotlib, tested in test_plots.py).  A missing one is imported lazily and
named in one line, exit 2."""
import subprocess
import sys

import pytest

from memsym.cli import main
from symbolic.errors import ConfigError

REPORT = ("nbformat", "nbclient", "nbconvert", "jupyter_client", "ipykernel")


def _missing(monkeypatch, *names):
    for name in names:                       # `import name` now raises ImportError
        monkeypatch.setitem(sys.modules, name, None)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("fmt", ["ipynb", "html", "tex,md,html,ipynb"])
def test_report_notebooks_without_the_report_extra_exit_2(tmp_path, monkeypatch, capsys, fmt):
    _missing(monkeypatch, "nbformat")
    assert main(["report", "--out", str(tmp_path / "o"), "--format", fmt]) == 2
    err = _one_line(capsys)
    assert "report extra" in err and "pip install 'memsym[report]'" in err and "nbformat" in err
    assert not (tmp_path / "o").exists()


def test_reproduce_out_without_the_report_extra_exits_2_before_the_table(tmp_path, monkeypatch, capsys):
    _missing(monkeypatch, "nbclient")
    assert main(["reproduce", "--out", str(tmp_path)]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert not any(tmp_path.iterdir())
    # reproduce has no --format: the message says what it writes by default, not a --format the user never typed
    assert "--format" not in cap.err and "reproduce --out writes ipynb,html by default" in cap.err, cap.err


def test_report_default_formats_without_the_extra_say_they_are_the_default(tmp_path, monkeypatch, capsys):
    _missing(monkeypatch, "nbformat")
    assert main(["report", "--out", str(tmp_path / "o")]) == 2
    err = _one_line(capsys)
    assert err.count("--format") == 1 and "report writes ipynb,html by default" in err and "tex,md,pdf" in err, err


def test_tex_and_md_need_no_extra(tmp_path, monkeypatch, capsys):
    _missing(monkeypatch, *REPORT, "matplotlib")
    assert main(["report", "--out", str(tmp_path), "--format", "tex,md"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "report.tex"]


def test_notebook_functions_import_lazily_and_name_the_extra(monkeypatch):
    from memsym import report as rp
    from memsym.report import notebook as nbm
    ctx = rp.Context.create()
    plan = rp.outline_report(ctx)
    _missing(monkeypatch, "nbformat")
    with pytest.raises(ConfigError, match=r"memsym\[report\]"):
        nbm.build_notebook(ctx, plan, plan.sections[0], ())
    _missing(monkeypatch, "nbconvert")
    nbm.html_exporter.cache_clear()
    with pytest.raises(ConfigError, match=r"memsym\[report\]"):
        nbm.html_exporter()


def test_importing_the_application_loads_no_extra():
    code = ("import sys, memsym.cli, memsym.report, memsym.report.notebook, memsym.plots\n"
            f"loaded = [m for m in {REPORT + ('matplotlib',)!r} if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
