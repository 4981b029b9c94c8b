"""The report's on-disk cache (memsym.report.cached): cached, uncached and rebuilt outputs are identical."""
import os
import pickle

import pytest

from derivations import notation as nt
from memsym import report as rp
from memsym.report import cached
from symbolic import cache, digests

FORMATS = ("tex", "md", "html")


@pytest.fixture(scope="module")
def ctx():
    return rp.Context.create()


def _files(out):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _publish(ctx, out, formats=FORMATS):
    rp.publish(ctx, out, formats)
    return _files(out)


@pytest.fixture(scope="module")
def uncached(ctx, tmp_path_factory):
    """The outputs with the cache off: what every cached run must write byte for byte."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MEMSYM_CACHE", "0")
    try:
        return _publish(ctx, tmp_path_factory.mktemp("off"))
    finally:
        mp.undo()


def _entries(root):
    folder = root / cached.KIND
    return sorted(folder.glob("*.entry")) if folder.is_dir() else []


def _payload(path, kind=cached.KIND):
    """The verified payload of an entry file (symbolic.cache.load), or None."""
    return cache.load(kind, path.stem)


def test_cold_and_warm_cache_write_the_uncached_outputs(ctx, uncached, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    assert _publish(ctx, tmp_path / "cold") == uncached
    entries = _entries(tmp_path / "cache")
    assert len(entries) == 7     # the computed report, its notebooks' HTML, report.tex/.md/.html, two shared tables
    assert _publish(ctx, tmp_path / "warm") == uncached
    assert _entries(tmp_path / "cache") == entries


def test_warm_cache_computes_nothing(ctx, uncached, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    _publish(ctx, tmp_path / "cold")
    from memsym.report import notebook, sections
    monkeypatch.setattr(sections, "complete_report", lambda *a, **k: pytest.fail("the report was recomputed"))
    monkeypatch.setattr(notebook, "to_html", lambda *a, **k: pytest.fail("a notebook was converted again"))
    monkeypatch.setattr(rp.rendering, "render", lambda *a, **k: pytest.fail("the report was rendered again"))
    assert _publish(ctx, tmp_path / "warm") == uncached


class _Planted:
    """A pickle that runs code when it is loaded (writes the file named ``marker``)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('x')",))


@pytest.mark.parametrize("garbage", [b"", b"not a pickle", pickle.dumps({"report": 1}), pickle.dumps(None), "planted",
                                     "one-bit"])
def test_an_unreadable_or_foreign_entry_is_ignored_and_rebuilt(ctx, uncached, tmp_path, monkeypatch, garbage):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    _publish(ctx, tmp_path / "cold")
    marker = tmp_path / "ran"
    for path in _entries(tmp_path / "cache"):
        data = path.read_bytes()
        path.write_bytes(pickle.dumps(_Planted(marker)) if garbage == "planted" else
                         data[:-1] + bytes([data[-1] ^ 1]) if garbage == "one-bit" else garbage)
    assert _publish(ctx, tmp_path / "again") == uncached and not marker.exists()
    for path in _entries(tmp_path / "cache"):     # rebuilt: verifies and loads as the right value again
        assert pickle.loads(_payload(path)) is not None


def test_tex_and_md_alone_match_the_uncached_outputs(ctx, uncached, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    for run in ("cold", "warm"):
        files = _publish(ctx, tmp_path / run, ("tex", "md"))
        assert files == {k: v for k, v in uncached.items() if k in ("report.tex", "report.md")}


def test_a_context_changed_by_hand_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    ctx = rp.Context.create()
    plan = rp.outline_report(ctx)
    assert cached.report_key(ctx, plan) is not None
    ctx.subs[nt.s] = 8192                          # what a notebook user does
    assert cached.report_key(ctx, plan) is None
    rep = cached.complete_report(ctx, plan)
    assert not _entries(tmp_path / "cache")
    setting = next(s for s in rep.sections if s.key == "setting")
    assert setting.blocks == rp.complete_report(ctx, plan).sections[0].blocks


def test_the_key_follows_the_configuration(ctx):
    other = rp.Context.create(stage=2)
    assert cached.report_key(ctx, rp.outline_report(ctx)) != cached.report_key(other, rp.outline_report(other))


def _past(*paths):
    """Date files before this process started (a file changed later gives no key: digests.tree_digest)."""
    for p in paths:
        os.utime(p, ns=(10 ** 18, 10 ** 18))


def test_tree_digest_sees_every_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "m.json").write_text("{}")
    _past(tmp_path / "a.py", tmp_path / "data" / "m.json")
    first = digests.tree_digest(tmp_path)
    (tmp_path / "data" / "m.json").write_text('{"h": 1}')
    _past(tmp_path / "data" / "m.json")
    second = digests.tree_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(os.urandom(8))
    assert None not in (first, second) and first != second == digests.tree_digest(tmp_path)


def test_configuration_free_tables_are_the_same_at_any_configuration(ctx):
    from derivations import config as cfg
    from memsym.report.tables import CONFIGURATION_FREE, TABLES
    other = rp.Context.create("deepseek-v2-lite", cfg.Layout(dp=4, tp=1, pp=2, ep=4, etp=1),
                              cfg.Training(mbs=2, seq=2048, zero=2))
    for key in CONFIGURATION_FREE:
        assert TABLES[key](ctx) == TABLES[key](other), key


def test_configuration_free_tables_are_kept_once_for_all_configurations(ctx, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path / "cache"))
    from memsym.report import tables
    first = cached.complete_report(ctx, rp.outline_report(ctx))
    other = rp.Context.create(stage=2)
    for key in tables.CONFIGURATION_FREE:
        monkeypatch.setitem(tables.TABLES, key, lambda c, key=key: pytest.fail(f"table {key} was recomputed"))
    second = cached.complete_report(other, rp.outline_report(other))
    shown = lambda rep: [b for s in rep.sections for b in s.blocks if getattr(b, "key", "") in tables.CONFIGURATION_FREE]
    assert shown(first) == shown(second) and len(shown(second)) == len(tables.CONFIGURATION_FREE)


def _equations(ctx):
    plan = rp.outline_report(ctx)
    return [rp.equation(ctx, ctx.terms[b.term_id], b.at_stage, b.parts)
            for s in plan.sections for b in s.blocks if b.kind == "equation"]


@pytest.fixture(scope="module")
def equations_uncached(ctx):
    mp = pytest.MonkeyPatch()
    mp.setenv("MEMSYM_CACHE", "0")
    try:
        return _equations(ctx)
    finally:
        mp.undo()


@pytest.mark.parametrize("garbage", [b"", b"memsym-closed-latex 0\n\\frac{1}{2}", b"\xff\xfe"])
def test_closed_forms_cached_per_term_match_and_survive_corruption(ctx, equations_uncached, tmp_path,
                                                                   monkeypatch, garbage):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    assert _equations(ctx) == equations_uncached                       # cold: written
    from memsym.report import forms as fm
    forms = sorted((tmp_path / fm.KIND).iterdir())
    assert forms
    real = rp.equations.closed_expr
    monkeypatch.setattr(rp.equations, "closed_expr", lambda *a: pytest.fail("a closed form was recomputed"))
    assert _equations(ctx) == equations_uncached                       # warm: read, nothing recomputed
    monkeypatch.setattr(rp.equations, "closed_expr", real)
    for path in forms:
        path.write_bytes(garbage)
    assert _equations(ctx) == equations_uncached                       # corrupted: ignored, rebuilt
    assert all(_payload(p, fm.KIND) is not None and p.read_bytes() != garbage for p in forms)  # rewritten


def test_closed_forms_are_shared_by_configurations_that_show_the_same_substitution(ctx, tmp_path, monkeypatch):
    from derivations import config as cfg
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    _equations(ctx)
    longer = rp.Context.create(training=cfg.Training(seq=8192))      # b s are not substituted in the shown forms
    monkeypatch.setattr(rp.equations, "closed_expr", lambda *a: pytest.fail("a closed form was recomputed"))
    monkeypatch.setattr(rp.equations, "breakable_latex", lambda *a: pytest.fail("a closed form was printed again"))
    assert all(e.closed for e in _equations(longer))


def test_equation_forms_of_a_new_sequence_length_are_read_not_computed(ctx, tmp_path, monkeypatch):
    """A report at another s (or b) shows the same forms: only the values are computed again."""
    from derivations import config as cfg
    longer = rp.Context.create(training=cfg.Training(seq=8200))
    monkeypatch.setenv("MEMSYM_CACHE", "0")
    expected = _equations(longer)
    monkeypatch.setenv("MEMSYM_CACHE", "1")
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    _equations(ctx)
    monkeypatch.setattr(rp.equations, "_forms", lambda *a: pytest.fail("an equation's forms were computed again"))
    assert _equations(longer) == expected


def test_equation_forms_are_json_and_a_bad_entry_is_rebuilt(ctx, tmp_path, monkeypatch):
    import json
    from memsym.report import forms as fm
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    first = _equations(ctx)
    payloads = [_payload(p, fm.KIND) for p in sorted((tmp_path / fm.KIND).iterdir())]
    forms = [json.loads(p) for p in payloads if p.startswith(b"{")]
    assert forms and all(set(f) == {"paper", "closed", "at", "uses", "parts", "value", "part_values"} for f in forms)
    assert fm._forms_of(b'{"paper": 1}') is None and fm._forms_of(b"\xff") is None
    assert _equations(ctx) == first


def test_contexts_with_the_same_registry_key_have_the_same_terms():
    """Context.registry_key names what derivations.configured builds the registry from: contexts
    with equal keys share one registry, and a context whose terms were changed has no key."""
    from derivations import config as cfg, configured
    trainings = [cfg.Training(), cfg.Training(seq=8192, mbs=2), cfg.Training(zero=3), cfg.Training(recompute="full"),
                 cfg.Training(recompute="selective"), cfg.Training(attention="flash"),
                 cfg.Training(conventions=cfg.Conventions(rank="megatron")),
                 cfg.Training(conventions=cfg.Conventions(swiglu="fused"))]
    models = [cfg.load_model("deepseek-v3"), cfg.load_model("deepseek-v2-lite")]
    seen = {}
    for model in models:
        for tr in trainings:
            c = rp.Context.create(model, training=tr, layout=cfg.Layout(dp=8, tp=1, pp=1, ep=8, etp=1))
            key = c.registry_key()
            assert key is not None
            if key in seen:
                assert configured(model, tr) is seen[key]
            seen[key] = configured(model, tr)
    assert len(set(map(id, seen.values()))) == len(seen)
    hand = rp.Context.create()
    hand._terms = dict(hand.terms)
    assert hand.registry_key() is None


def test_the_forms_trees_evaluate_as_the_terms():
    """The value trees kept with an equation's forms (memsym/report/equations.py: tree, tree_value) give the
    term's and each part's exact value, as Context.exact does, at several configurations of each registry."""
    from fractions import Fraction
    from derivations import config as cfg
    from memsym.report import equations as eq
    from symbolic.notation import expand_derived
    cases = [(None, cfg.Training()), (None, cfg.Training(seq=8192, mbs=3, recompute="selective", zero=3)),
             (None, cfg.Training(conventions=cfg.Conventions(rank="megatron"), recompute="full")),
             ("deepseek-v2-lite", cfg.Training(seq=2048, attention="flash"))]
    checked = 0
    for model, tr in cases:
        c = rp.Context.create(model, training=tr, layout=cfg.Layout(dp=8, tp=1, pp=2, ep=8, etp=1, cp=2))
        for term in c.terms.values():
            full = c.subs_for(term)
            t = eq.tree(term.base_expr)
            got = eq.tree_value(t, full)
            want = c.exact(term, full)
            assert got is None or got == want, term.id
            checked += got is not None
            for p in term.parts:
                got = eq.tree_value(eq.tree(expand_derived(p.expr)), full)
                assert got is None or got == c.exact(p.expr, full), (term.id, p.key)
    assert checked > 200
    # a symbol unset or not a rational, or a division by zero: None (the caller evaluates the expression)
    from derivations import notation as nt
    assert eq.tree_value(["+", "s", 1], {}) is None
    assert eq.tree_value(["+", "s", 1], {nt.SYMBOLS["s"]: 0.5}) is None
    assert eq.tree_value(["^", "TP", -1], {nt.SYMBOLS["TP"]: 0}) is None
    assert eq.tree_value(["^", "TP", -1], {nt.SYMBOLS["TP"]: 4}) == Fraction(1, 4)
    assert eq.tree_value(["q", 1, 3], {}) == Fraction(1, 3)
