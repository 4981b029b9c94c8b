"""Plots: PNG and SVG by extension, deterministic SVG, atomic files, the commands' --plot."""
import importlib.util
import os
import subprocess
import sys

import pytest

from memsym import plots
from memsym.cli import main
from derivations.config import ConfigError

GiB = 2 ** 30
SERIES = {"none": ([1024, 2048, 4096], [30 * GiB, 45 * GiB, 90 * GiB]),
          "full": ([1024, 2048, 4096], [20 * GiB, 21 * GiB, 23 * GiB])}
ROWS = [("DP32 TP2", {"weights": 12 * GiB, "gradients": 23 * GiB, "optimizer": 5 * GiB, "activations": 23 * GiB},
         84 * GiB),
        ("DP16 TP4", {"weights": 6 * GiB, "gradients": 12 * GiB, "optimizer": 5 * GiB, "activations": 12 * GiB},
         None)]
TORNADO = [("s", 0.68), ("TP", -0.46), ("b", 0.36), ("PP 16->17 (finite diff.)", 0.0)]
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib (the plot extra) is not installed")


def draw(kind, path):
    if kind == "seq":
        plots.memory_vs_seq(SERIES, 80 * GiB, str(path), title="t", marks={"none": 3000})
    elif kind == "stack":
        plots.stacked_breakdown(ROWS, 80 * GiB, str(path), title="t")
    else:
        plots.tornado(TORNADO, str(path), title="t")


@needs_matplotlib
@pytest.mark.parametrize("kind", ["seq", "stack", "tornado"])
def test_png_and_svg_by_extension(tmp_path, kind):
    png, svg = tmp_path / "a.png", tmp_path / "a.svg"
    draw(kind, png)
    draw(kind, svg)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "<dc:date>" not in text
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".memsym-")]


@needs_matplotlib
@pytest.mark.parametrize("kind", ["seq", "tornado"])
def test_svg_is_deterministic(tmp_path, kind):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    draw(kind, a)
    draw(kind, b)
    assert a.read_bytes() == b.read_bytes()


def test_bad_outputs(tmp_path):
    with pytest.raises(ConfigError, match="png or .svg"):
        plots.check_output(str(tmp_path / "x.pdf"))
    with pytest.raises(ConfigError, match="does not exist"):
        plots.check_output(str(tmp_path / "no" / "x.png"))
    with pytest.raises(ConfigError, match="directory"):
        plots.check_writable(str(tmp_path))


def test_write_atomic_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")

    with pytest.raises(TypeError):
        plots.write_atomic(str(target), 12345)  # not str or bytes: the write fails
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out.csv"]
    plots.write_atomic(str(target), "new")
    assert target.read_text() == "new"


def test_an_unwritable_folder_names_the_file_typed_not_the_temporary_one(capsys):
    """(adversarial review F10: root's access() calls /proc writable; the error named /proc/.x.csv.lvnuz6gw.tmp)"""
    from clirun import run
    code, _, err = run(capsys, "search", "--model", "deepseek-v2-lite", "--gpus", "16", "--top", "2",
                       "--csv", "/proc/memsym-x.csv")
    assert code == 2 and err.rstrip().endswith("/proc/memsym-x.csv") and ".tmp" not in err, err


@needs_matplotlib
def test_commands_plot(tmp_path, capsys):
    t, f, s = tmp_path / "t.svg", tmp_path / "f.png", tmp_path / "s.svg"
    assert main(["sensitivity", "--wrt", "s,TP,PP", "--plot", str(t)]) == 0
    assert main(["fit", "--hbm", "80GiB", "--zero", "1", "--solve", "seq", "--plot", str(f)]) == 0
    assert main(["search", "--model", "deepseek-v2-lite", "--gpus", "16", "--top", "8", "--plot", str(s)]) == 0
    capsys.readouterr()
    assert "PP 16" in t.read_text() or "PP" in t.read_text()
    assert f.read_bytes()[:4] == b"\x89PNG" and s.stat().st_size > 1000


def test_bad_plot_name_exits_2_and_writes_nothing(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memsym", "sensitivity", "--wrt", "s", "--plot",
                        str(tmp_path / "x.jpg")], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and ".png or .svg" in p.stderr
    assert os.listdir(tmp_path) == []


def test_plot_without_the_plot_extra_exits_2_before_any_work(tmp_path, monkeypatch, capsys):
    for name in ("matplotlib", "matplotlib.pyplot"):     # `import matplotlib` now raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    target = tmp_path / "fit.png"
    assert main(["fit", "--hbm", "80GiB", "--plot", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "plot extra" in err and "pip install 'memsym[plot]'" in err
    assert not target.exists()
    with pytest.raises(ConfigError, match=r"memsym\[plot\]"):
        plots._pyplot()
