"""The calculator page as a practitioner uses it (issue 29): the state in the URL (the command line's flag names), the
command line shown for it (run as shown, it prints the numbers the page shows), no sideways scrolling on a phone or
a laptop, the assumptions folded away (at most 25 controls at first), an out-of-range input clearing every number,
and a print view.  Headless Chromium through the system chromedriver (tests/conftest.py's fixtures)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from fractions import Fraction

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: URL states a practitioner would share, each shown by the page and printed by the command line it shows.
STATES = [
    "zero=1",
    "tp=4&zero=1",
    "gpus=1024&gpu=h800&global-batch=15360&seq=4096",
    "gpus=256",  # a GPU count alone names a run (flash attention): the command shown says --gpus, not only --dp 8
    "model=deepseek-v2&tp=4&pp=8&ep=16&dp=16&zero=3&recompute=selective&attention=flash&mbs=2&seq=8192",
    "conventions=mcore-te&schedule=interleaved&vpp=2&microbatches=32&recompute=custom:norm,mla_up&fp8-activations",
    "recipe=deepseek-v3&imbalance=3/2",
]


def _load(d, page, state="", settle=0.0):
    """The page at ``#state`` (a fresh load: the hash read as the page starts)."""
    d.get("about:blank")
    from test_page import _loaded
    _loaded(d, page.as_uri() + ("#" + state if state else ""))
    if settle:
        time.sleep(settle)


def _exact(d, key):
    el = d.find_elements("id", f"v-{key}")
    return Fraction(el[0].get_attribute("data-exact")) if el else None


def _command(d):
    return d.find_element("id", "command-text").text


def _run(command):
    """The command line as the page shows it, run (memsym estimate ... --json): its JSON."""
    argv = shlex.split(command)
    assert argv[:2] == ["memsym", "estimate"], command
    r = subprocess.run([sys.executable, "-m", "memsym", *argv[1:], "--json"], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, (command, r.stderr)
    return json.loads(r.stdout)


@pytest.mark.parametrize("state", STATES)
def test_the_command_shown_prints_the_numbers_shown(browser, page, state):
    """Load #state; run the command line the page shows; every byte count, the parameters and the stage agree."""
    _load(browser, page, state)
    state_shown = browser.execute_script("return document.body.dataset.state")
    assert state_shown == "ok", browser.find_element("id", "error").text
    command = _command(browser)
    for part in state.split("&"):  # the URL's options are the command's flags
        key = part.split("=")[0]
        assert f"--{key}" in command, (state, command)
    js = _run(command)
    assert int(browser.find_element("id", "v-stage").get_attribute("data-index")) == js["stage"]["index"]
    for k in ("non_moe", "moe", "total"):
        assert _exact(browser, f"params-{k}") == Fraction(js["params"][k]), k
    for k in ("weights", "gradients", "optimizer", "activations", "total"):
        assert _exact(browser, f"bytes-{k}") == Fraction(js["bytes"][k]), (state, k)
    if state == "zero=1":
        assert js["bytes"]["optimizer"] == 5_928_075_264


def test_the_url_follows_the_controls(browser, page):
    """Changing a control writes only the non-default options into the hash (replaceState) and the command."""
    from selenium.webdriver.support.ui import Select
    _load(browser, page)
    assert browser.execute_script("return location.hash") == ""
    Select(browser.find_element("id", "opt-zero")).select_by_value("1")
    el = browser.find_element("id", "opt-tp")
    el.send_keys("4")
    assert browser.execute_script("return location.hash") == "#tp=4&zero=1"
    assert "--tp 4" in _command(browser) and "--zero 1" in _command(browser)
    # a hash typed by hand (hashchange) resets what it does not name
    browser.execute_script("location.hash = 'pp=8'")
    time.sleep(0.3)
    assert browser.find_element("id", "opt-tp").get_attribute("value") == ""
    assert browser.find_element("id", "opt-pp").get_attribute("value") == "8"
    assert "--pp 8" in _command(browser) and "--tp" not in _command(browser)


@pytest.mark.parametrize("state, words", [
    ("zero=1&imbalance=1e-2000000000", "imbalance"),
    ("zero=7", "invalid choice"),
    ("tpp=4", "not an option"),
    ("dp=0", "positive integer"),
])
def test_a_refused_input_clears_every_number(browser, page, state, words):
    """After a valid state, a refused one: an error that says why, no number of the estimate left, no exception."""
    _load(browser, page, "zero=1")
    assert _exact(browser, "bytes-optimizer") == 5_928_075_264
    browser.get_log("browser")
    browser.execute_script(f"location.hash = {json.dumps(state)}")
    time.sleep(0.3)
    body = browser.execute_script("return document.body.innerText").replace(",", "")
    err = browser.find_element("id", "error").text
    assert err and words in err, err
    assert browser.execute_script("return document.body.dataset.state") == "error"
    assert not browser.find_elements("css selector", "#results *")
    assert "5928075264" not in body and "6250364928" not in body
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.parametrize("state", ["gpus=1000", "gpus=1024&dp=4", "gpus=96&tp=4&pp=8&cp=2", "recompute=custom:foo",
                                   "recompute=bar", "recompute=custom", "attention=foo", "rank=x"])
def test_a_refused_url_says_what_the_command_line_says(browser, page, state):
    """A GPU count the layout does not divide or that contradicts a typed DP, a recomputation the command line does
    not read, a choice it does not offer: the page says what `memsym estimate --KEY=VALUE ...` of the URL's options
    prints after "error: ", under the field; the command it shows for a GPU count holds --gpus, and is refused
    alike."""
    _load(browser, page, state)
    assert browser.execute_script("return document.body.dataset.state") == "error"
    argvs = [[f"--{part}" for part in state.split("&")]]
    if state.startswith("gpus"):  # the command shown, run, is refused alike
        argvs.append(shlex.split(_command(browser))[2:])
        assert "--gpus" in argvs[-1], argvs
    for argv in argvs:
        r = subprocess.run([sys.executable, "-m", "memsym", "estimate", *argv], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
        assert r.returncode == 2, r.stderr
        message = r.stderr.strip().split("error: ", 1)[1]
        assert browser.find_element("id", "error").text == message
        assert browser.find_element("id", f"err-opt-{state.split('=')[0]}").text == message


@pytest.mark.parametrize("width", [390, 1280])
def test_no_sideways_scrolling_and_few_controls_at_first(browser, page, tmp_path, width):
    """At a phone's and a laptop's width: nothing wider than the window (formulas wrap, the bar fits), at most 25
    controls shown before any is unfolded; the screenshots kept beside the test's files."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
    try:
        # the widest formulas found: the step's moments under transformers' and Megatron-Core's full recomputation
        for state in ("", STATES[5], "schedule=1f1b&recompute=full&conventions=transformers",
                      "model=paper/models/glm-5.json&conventions=mcore&recompute=full"):
            _load(browser, page, state, settle=0.3)
            # every formula unfolded too (the widest the page gets)
            browser.execute_script("document.querySelectorAll('#results details').forEach((e) => { e.open = true; });"
                                   "fitFormulas();")
            sw = browser.execute_script("return document.documentElement.scrollWidth")
            iw = browser.execute_script("return window.innerWidth")
            assert iw == width and sw <= iw, (state, sw, iw)
            wide = browser.execute_script(
                "return [...document.querySelectorAll('#results *')].filter((e) => e.getBoundingClientRect().right >"
                " window.innerWidth + 1).map((e) => e.tagName).slice(0, 5)")
            assert wide == [], (state, wide)
            browser.save_screenshot(str(tmp_path / f"page-{width}-{len(state)}.png"))
        _load(browser, page, settle=0.3)
        shown = browser.execute_script(
            "return [...document.querySelectorAll('input, select, textarea')].filter((e) => e.offsetParent !== "
            "null).length")
        assert shown <= 25, shown
        assert not browser.find_element("id", "assumptions").get_attribute("open")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_refusal_in_the_assumptions_unfolds_them(browser, page):
    """A refused switch set from the URL is shown under its field: the folded group opens."""
    _load(browser, page, "conventions=modelzoo&mtp")
    assert browser.execute_script("return document.body.dataset.state") == "error"
    slot = browser.find_element("id", "err-opt-mtp")
    assert slot.is_displayed() and slot.text


def test_print_view_hides_the_controls(browser, page):
    _load(browser, page, "zero=1")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert not browser.find_element("id", "controls").is_displayed()
        assert browser.find_element("id", "results").is_displayed()
        assert browser.find_element("id", "command-text").is_displayed()
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def test_search_panel_has_its_place(browser, page):
    """The layout search's place (section#search) and hook (renderSearch), empty until the search lands."""
    _load(browser, page)
    assert browser.find_elements("css selector", "section#search")
    assert browser.execute_script("return typeof renderSearch") == "function"
