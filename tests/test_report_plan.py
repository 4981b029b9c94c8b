"""A report of a new sequence length from its plan (memsym/report/plan.py, planmake.py): the files the full
computation writes, byte for byte, in a process without sympy; a tampered, malformed or inapplicable plan is
not used."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from memsym.report import plan as P

ROOT = Path(__file__).resolve().parents[1]
FORMATS = "tex,md,html"


def _run(env, *args, check=True):
    return subprocess.run([sys.executable, "-m", "memsym", "report", "--format", FORMATS, *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=check)


def _files(out: Path):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _env(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MEMSYM_CACHE", "XDG_CACHE_HOME")}
    env.update(MEMSYM_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), **extra)
    return env


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """(folder, environment) of a cache holding the plan of the default report, made by `memsym report`."""
    d = tmp_path_factory.mktemp("plan")
    env = _env(d / "cache")
    r = _run(env, "--out", d / "base")
    assert "making the report's plan\n" in r.stderr, r.stderr        # made and stored (not ": none")
    return d, env


def _computed(tmp, *args):
    """The files of the full computation, every cache off (nothing of the plan's process)."""
    out = tmp / ("full" + "-".join(map(str, args)).replace("/", "_"))
    _run(_env(tmp / "nocache", MEMSYM_CACHE="0"), *args, "--out", out)
    return _files(out)


def _planned(env, tmp, *args):
    out = tmp / ("plan" + "-".join(map(str, args)).replace("/", "_"))
    r = _run(env, *args, "--out", out)
    return _files(out), r


def test_new_sequence_lengths_from_the_plan_are_the_computed_reports(planned, tmp_path):
    _, env = planned
    rng = random.Random(25)
    for seq in (2 * rng.randrange(1, 2 ** 16), 2 * rng.randrange(2 ** 16, 2 ** 20)):
        got, r = _planned(env, tmp_path, "--seq", seq)
        assert "from its plan" in r.stderr, r.stderr
        assert got == _computed(tmp_path, "--seq", seq), seq
        assert r.stdout.splitlines() == [str(tmp_path / f"plan--seq-{seq}" / n) for n in sorted(got)]


def test_other_configurations_have_their_own_plan(planned, tmp_path):
    """--mbs is a part of the plan's key: its first report is computed (and makes its plan), the next is planned."""
    _, env = planned
    first, r = _planned(env, tmp_path, "--mbs", 2, "--seq", 1024)
    assert "from its plan" not in r.stderr and "making the report's plan\n" in r.stderr
    got, r = _planned(env, tmp_path, "--mbs", 2, "--seq", 6002)
    assert "from its plan" in r.stderr
    assert got == _computed(tmp_path, "--mbs", 2, "--seq", 6002)


def test_the_plan_path_loads_no_sympy_jinja_or_nbconvert(planned, tmp_path):
    _, env = planned
    code = ("import sys\nfrom memsym import cli\nrc = cli.main(['report', '--format', 'tex,md,html', '--seq', '2222', "
            f"'--out', {str(tmp_path / 'o')!r}])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sympy', 'jinja2', 'nbconvert', 'nbformat')))\n"
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert "from its plan" in r.stderr
    assert r.stdout.splitlines()[-1] == "[]"


def _plan_entries(cache_dir: Path):
    out = []
    for p in (cache_dir / "report").glob("*.entry"):
        raw = p.read_bytes()
        if b'{"version":' in raw:
            out.append(p)
    return out


def test_a_tampered_plan_is_deleted_and_the_report_computed(planned, tmp_path):
    d, env = planned
    cache_dir = tmp_path / "cache"
    import shutil
    shutil.copytree(d / "cache", cache_dir)
    env = dict(env, MEMSYM_CACHE_DIR=str(cache_dir))
    tampered = {}
    for p in _plan_entries(cache_dir):
        raw = bytearray(p.read_bytes())
        raw[raw.index(b"report.md") + 40] ^= 1              # one bit of the plan's text
        p.write_bytes(bytes(raw))
        tampered[p] = bytes(raw)
    assert tampered
    got, r = _planned(env, tmp_path, "--seq", 3000)
    assert "from its plan" not in r.stderr
    assert got == _computed(tmp_path, "--seq", 3000)
    # the entry read was deleted (and a plan made again by the computed report)
    assert any(not p.exists() or p.read_bytes() != raw for p, raw in tampered.items())


def test_a_pdf_or_notebooks_are_never_served_from_a_plan(planned, monkeypatch):
    d, env = planned
    monkeypatch.setenv("MEMSYM_CACHE_DIR", env["MEMSYM_CACHE_DIR"])
    from memsym.cli import build_parser
    from memsym.commands import common
    args = build_parser().parse_args(["report", "--seq", "2050"])   # as the command line resolves them
    config = (None, common.layout_from_args(args), common.training_from_args(args), None)
    said = []
    assert P.serve(*config, ("tex", "md", "html"), d / "s1", said.append)  # the plan
    for formats in (("tex", "md", "html", "ipynb"), ("tex", "pdf"), ("tex", "md", "html", "pdf", "ipynb")):
        assert P.serve(*config, formats, d / "s2", said.append) is None
    assert not (d / "s2").exists()


def test_a_plan_that_is_not_a_plan_is_not_used(planned, tmp_path, monkeypatch):
    """Verified entries under the plan's key that are not plans (malformed slots, a foreign tree) are refused."""
    d, env = planned
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    from derivations import config as cfg
    from symbolic import cache
    import dataclasses
    model, layout = cfg.load_model("deepseek-v3"), cfg.Layout()
    training = dataclasses.replace(cfg.Training(), seq=2050)
    comp = cfg.stage(model, layout, 1)
    parts = P.fresh_parts(P.Setting(model, layout, training, comp))
    good = {"version": P.VERSION, "s": 4096, "slots": [["t", ["*", 2, "s"], "int"]], "lines": ["x"],
            "files": {"report.md": [[0], 0]},
            "fresh": json.loads(json.dumps(P.skeletons(parts)))}
    assert P.fill(good, 2050, parts) == {"report.md": "x4,100"}
    for bad in (["t", ["*", 2, "b"], "int"], ["t", ["exec", "s"], "int"], ["t", "s", "eval"], ["f", "x", 0, 0, "int"],
                ["k", ["setting", 99], 0], ["t", ["q", 1, 0], "int"]):
        assert P.fill(dict(good, slots=[bad]), 2050, parts) is None, bad
    other = dataclasses.replace(training, seq=2 ** 20)      # the estimate's caption keeps its digits' places
    assert P.fill(good, 2 ** 20, P.fresh_parts(P.Setting(model, layout, other, comp))) is not None
    changed = P.fresh_parts(P.Setting(model, layout, training, comp))
    changed["overheads"] = dataclasses.replace(changed["overheads"], rows=changed["overheads"].rows[:1])
    assert P.fill(good, 2050, changed) is None             # a row that s would hide: not this plan
    k = P.plan_key(model, layout, training, comp, ("md",), False)
    cache.store("report", k, b"[1, 2]")
    assert P.load(k) is None


def test_a_plan_with_an_untraced_number_is_not_stored(tmp_path, monkeypatch):
    """A number the sequence length changes but whose expression was not traced (here: the activation terms'
    expressions dropped) gives this report at its own s, but not the computed report at a second s: no plan."""
    from memsym import report as rp
    from memsym.report import planmake
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    real = planmake.s_tree

    def without_activations(expr, subs):
        t = real(expr, subs)
        return None if getattr(expr, "id", "").startswith("act.") else t
    monkeypatch.setattr(planmake, "s_tree", without_activations)
    said = []
    rp.publish(rp.Context.create(), tmp_path / "out", ("md",), said.append, make_plan=True)
    assert "no plan: the sequence length changes more than its numbers" in said
    assert not _plan_entries(tmp_path / "cache")
