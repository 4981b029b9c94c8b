"""The report's HTML (report.html and the notebooks' HTML) loads nothing from the network: the
formulas are typeset offline as MathML by the vendored KaTeX; with networking off they render."""
from __future__ import annotations

import os
import shutil
from html.parser import HTMLParser

import pytest

from derivations import config as cfg


class _Resources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href") and v]


def remote(html: str):
    p = _Resources()
    p.feed(html)
    return [r for r in p.refs if r[2].strip().lower().startswith(("http://", "https://", "//"))]


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory):
    pytest.importorskip("nbconvert")
    from memsym.report import Context, publish
    out = tmp_path_factory.mktemp("report-html")
    ctx = Context.create(cfg.DEFAULT_MODEL, cfg.Layout(), cfg.Training(), 1)
    publish(ctx, str(out), ("html",), lambda m: None)
    return out


def test_no_generated_html_loads_a_remote_resource(html_dir):
    pages = sorted(p for p in os.listdir(html_dir) if p.endswith(".html"))
    assert "report.html" in pages and len(pages) > 1  # report.html and the notebooks' HTML
    for name in pages:
        html = (html_dir / name).read_text(encoding="utf-8")
        assert remote(html) == [], name
        assert "mathjax" not in html.lower(), name
        assert 'output: "mathml"' in html, name


def test_report_html_renders_its_formulas_offline(html_dir, tmp_path):
    from conftest import _chromium
    chrome, driver = _chromium(), shutil.which("chromedriver")
    if not (chrome and driver):
        if os.environ.get("MEMSYM_REQUIRE_BROWSER"):
            pytest.fail("MEMSYM_REQUIRE_BROWSER is set but chromium / chromedriver are not installed")
        pytest.skip("chromium and chromedriver are not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        for name in ("report.html",
                     next(p for p in sorted(os.listdir(html_dir)) if p.startswith("report-") and "activations" in p
                                            and p.endswith(".html"))):
            d.get((html_dir / name).as_uri())
            assert d.execute_script("return document.body.getAttribute('data-math')") == "rendered", name
            assert d.execute_script("return document.querySelectorAll('math').length") > 10, name
            assert d.execute_script("return document.querySelectorAll('.katex-error').length") == 0, name
            assert d.execute_script("return performance.getEntriesByType('resource').length") == 0, name
            text = d.execute_script("return document.body.innerText")
            assert "\\frac" not in text and "\\(" not in text, name
        d.save_screenshot(str(tmp_path / "report.png"))
    finally:
        d.quit()
