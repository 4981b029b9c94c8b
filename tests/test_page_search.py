"""The calculator page's layout search panel (issue 29, items 4 and 7): for a page state with a GPU count, the panel's
rows are `memsym search`'s, in its order, computed in the page from the functions memsym/page/search.py prints.
Each state is loaded in headless Chromium (tests/conftest.py's fixtures), the command line the panel shows is run
(``memsym search ... --json``) and its first rows compared field by field; the panel's counts too."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Page states a practitioner would search: the acceptance's 1024 H800s with a global batch; fewer GPUs; a small
#: cluster the estimate's default layout (TP 2, PP 16) refuses (the search still runs: it reads no layout field); no
#: global batch (the paper's one micro-batch per stage); another GPU; DualPipe; another model with the eager kernel;
#: the released models with DeepSeek Sparse Attention (GLM-5, DeepSeek-V3.2-Exp: their step time reads its keys).
STATES = [
    "gpus=1024&gpu=h800&global-batch=15360&seq=4096",
    "gpus=256&global-batch=1024",
    "model=deepseek-v2-lite&gpus=12&global-batch=48",
    "gpus=256",
    "gpus=512&gpu=b200&global-batch=2048",
    "gpus=512&global-batch=4096&schedule=dualpipe",
    "model=deepseek-v2-lite&gpus=32&attention=eager",
    # DeepSeek Sparse Attention (evaluate.dsa_attention: the step's attention keys and the indexers' parameters)
    "model=paper/models/glm-5.json&gpus=256&global-batch=1024",
    "model=paper/models/deepseek-v3.2-exp.json&gpus=512&seq=16384",
    # a conventions preset and the options of issue 42 (each configuration by the estimate's device(): search.js
    # pushExact): offloading under a global batch (Megatron's ZeRO stages only), the eager core attention offloaded in
    # the paper's view, a linear recipe on a GPU with its rate, Megatron's virtual stages (PP 4 x V 2 only)
    "model=deepseek-v2-lite&gpus=16&global-batch=64&conventions=mcore&offload-activations=mlp_norm,expert_fc1",
    "model=deepseek-v2-lite&gpus=16&conventions=mcore-te&offload-activations=core_attn&attention=eager",
    "model=deepseek-v2-lite&gpus=16&gpu=b200&conventions=mcore-te&linear-recipe=mxfp8&quantized-param-gather",
    "model=deepseek-v2-lite&gpus=16&global-batch=64&schedule=interleaved&vpp=2&conventions=mcore-te"
    "&virtual-layers=4,4,4,3,3,3,3,3",
]
#: The fields compared, row by row: the layout, the choice, the micro-batches; and the numbers, to the byte and to
#: the tenth of a token per second (what the command line prints).
KEYS = ("dp", "tp", "pp", "ep", "etp", "cp", "zero", "recompute", "mbs", "seq", "microbatches")
NUMBERS = ("weights", "gradients", "optimizer", "activations", "total", "peak", "headroom", "tokens_per_gpu_s")
ROWS = 10


def _load(d, page, state):
    d.get("about:blank")
    from test_page import _loaded
    _loaded(d, page.as_uri() + "#" + state)


def _searched(d, timeout=90.0):
    """window.memsymSearch once the search is done (or refused)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = d.execute_script("return window.memsymSearch")
        if s and s["status"] in ("done", "refused"):
            return s
        time.sleep(0.1)
    raise AssertionError(f"the page's search did not finish in {timeout} s: {s}")


def _cli(command):
    argv = shlex.split(command)
    assert argv[:2] == ["memsym", "search"], command
    r = subprocess.run([sys.executable, "-m", "memsym", *argv[1:], "--json"], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, (command, r.stderr)
    return json.loads(r.stdout)


@pytest.mark.parametrize("state", STATES)
def test_the_panel_lists_memsym_search_rows(browser, page, state):
    """The panel's first rows are `memsym search --json`'s for the command it shows, in order, field by field; the
    counts of layouts and configurations agree; the table shows the same rows."""
    _load(browser, page, state)
    s = _searched(browser)
    assert s["status"] == "done", s
    shown = browser.find_element("css selector", "#search .search-command code").text
    assert shown == s["command"]
    want = _cli(s["command"])
    got = s["rows"]
    assert len(got) >= min(ROWS, len(want["rows"])) > 0
    for i, (a, b) in enumerate(zip(got[:ROWS], want["rows"][:ROWS])):
        assert {k: a.get(k) for k in KEYS} == {k: b.get(k) for k in KEYS}, (state, i)
        assert {k: a.get(k) for k in NUMBERS} == {k: b.get(k) for k in NUMBERS}, (state, i)
    c, w = s["counts"], want["counts"]
    assert (c["candidates"], c["valid"], c["considered"], c["fitting"]) == \
        (w["lattice_candidates"], w["valid_layouts"], w["considered"], w["fitting"])
    assert c["rejected"] == w["rejected"] and {k: v for k, v in c["invalid"].items() if v} == \
        w["invalid_configurations"]
    # the table as a practitioner reads it: rank, layout and choice of each row
    table = browser.execute_script(
        "return [...document.querySelectorAll('#search-rows tbody tr')].map(r => [...r.cells].map(c => c.innerText))")
    table = [[c.replace("\u00a0", " ") for c in cells] for cells in table]  # a degree and its value never apart
    assert len(table) == min(20, len(want["rows"]))
    for i, (cells, b) in enumerate(zip(table[:ROWS], want["rows"])):
        assert cells[0] == str(i + 1)
        assert cells[1] == f"DP {b['dp']} · TP {b['tp']} · PP {b['pp']} · EP {b['ep']} · ETP {b['etp']} · CP {b['cp']}"
        assert cells[2].startswith(f"ZeRO-{b['zero']} · {b['recompute']} · b {b['mbs']}")
        assert cells[3].replace(",", "") == f"{b['tokens_per_gpu_s']:.1f}"


def test_the_search_of_1024_gpus_takes_seconds(browser, page):
    """The acceptance's search (1024 H800s, 172,020 configurations) runs in the page in a few seconds, after the
    estimate is shown: a 'searching' state first."""
    _load(browser, page, "gpus=1024&gpu=h800&global-batch=15360&seq=4096")
    first = browser.execute_script("return [window.memsymSearch.status, document.body.dataset.state]")
    assert first[1] == "ok"
    s = _searched(browser)
    assert s["status"] == "done" and s["ms"] < 15000, s["ms"]
    assert first[0] in ("searching", "done")


def test_no_gpu_count_no_search_and_a_refusal_clears_it(browser, page):
    """Without --gpus the panel says what it needs and lists nothing; an input the search reads refused (a sequence
    length of 0) leaves no row of an earlier search."""
    _load(browser, page, "zero=1")
    time.sleep(0.5)
    s = browser.execute_script("return window.memsymSearch")
    assert s["status"] == "idle" and not s["rows"]
    assert "--gpus" in browser.find_element("id", "search").text
    _load(browser, page, "model=deepseek-v2-lite&gpus=12&global-batch=48")
    assert _searched(browser)["rows"]
    assert browser.execute_script("return document.body.dataset.state") == "error"  # DP = 12 / (TP 2 PP 16)
    browser.execute_script("const el = document.getElementById('opt-seq'); el.value = '0';"
                           "el.dispatchEvent(new Event('input', {bubbles: true}));")
    s = browser.execute_script("return window.memsymSearch")
    assert not s["rows"] and not browser.find_elements("id", "search-rows")


def test_show_puts_a_row_into_the_estimate(browser, page):
    """A row's 'show' button sets the layout, ZeRO stage, recomputation and micro-batch size: the estimate and its
    command line are that configuration's (DP from the GPU count)."""
    _load(browser, page, "gpus=512&global-batch=4096&schedule=dualpipe")
    s = _searched(browser)
    r = s["rows"][0]
    browser.find_element("css selector", "#search-rows button.search-use").click()
    time.sleep(0.3)
    assert browser.execute_script("return document.body.dataset.state") == "ok"
    cmd = browser.find_element("id", "command-text").text
    for flag in (f"--dp {r['dp']}", f"--tp {r['tp']}", f"--pp {r['pp']}", f"--ep {r['ep']}", f"--zero {r['zero']}",
                 f"--recompute {r['recompute']}", f"--mbs {r['mbs']}"):
        assert flag in cmd, (flag, cmd)


def test_the_page_runs_the_generated_modules():
    """The page's search runs the printed per-device assembly and the step-time variants it needs, written in
    JavaScript over floats (memsym/page/pyjs.py), each function once with the arguments the Python takes, and the
    estimate's printed terms over floats (FNS_OF of a number system); no second generator of search kernels."""
    import ast
    import re

    from derivations import generated
    from memsym.page import data, search
    printed = search.generate()["js"]
    folder = os.path.dirname(generated.__file__)
    assert not os.path.exists(os.path.join(folder, "deepseek_search.py"))
    for module, wanted in (("deepseek", {"device"}), ("deepseek_time", {f"_step_{v}" for v in search.TIME_VARIANTS})):
        with open(os.path.join(folder, module + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        fns = {n.name: [a.arg for a in n.args.args] for n in tree.body if isinstance(n, ast.FunctionDef)
               and n.name in wanted}
        assert set(fns) == wanted, module
        for name, args in fns.items():
            assert len(re.findall(rf"^function {name}\(", printed, re.M)) == 1, name
            assert f"function {name}({', '.join(args)}) {{" in printed, name
    assert "const FNS = FNS_OF(Q);" in data.assembly_js([data.DEEPSEEK])
    # the step time's inputs (derivations/steptime/evaluate.py) and the layout rules (enumeration.py), printed once
    import inspect

    from derivations.analyses import enumeration
    from derivations.steptime import evaluate
    for fn in (evaluate.constants, evaluate.dsa_attention, evaluate.stage_inputs, evaluate.groups_kept,
               enumeration.layout_rules):
        args = ", ".join(inspect.signature(fn).parameters)
        assert len(re.findall(rf"^function {fn.__name__}\({re.escape(args)}\) {{", printed, re.M)) == 1, fn
    with open(os.path.join(ROOT, "templates", "page", "search.js"), encoding="utf-8") as f:
        js = f.read()
    assert "FNS_OF(FLOAT)" in js and "SEARCH_ASSEMBLY(FLOAT)" in js
    # no second writing of what those define: DSA's keys, the recipes' cast bytes, a layout rule
    assert not any(name in js for name in ("k_I", "X_A", "B_EP", "tp-inside-node", "pp-layers"))
