"""The calculator page offering DeepSeek-V4 models (``memsym page --model``): the page evaluates the family's own
generated terms (attention, CSA and HCA compressors per stage count, MoE, head) and shows, byte for byte, what
``memsym estimate`` prints for the same controls, at layouts that split the CSA and HCA layers unevenly."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_page import _argv, _configure, _dom_exact

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("paper/models/deepseek-v4-flash.json", "tests/data/v4/config.json")


@pytest.fixture(scope="module")
def v4_page(tmp_path_factory):
    from derivations.config.presets import load_model
    from memsym.page import PAGE_NAME, render
    from memsym.page import data as page_data
    data = page_data.generate(models=[(m, load_model(str(ROOT / m))) for m in MODELS])
    path = tmp_path_factory.mktemp("v4page") / PAGE_NAME
    path.write_text(render(data=data), encoding="utf-8")
    return path


CONFIGS = [
    [("model", MODELS[0])],
    [("model", MODELS[0]), ("pp", 4), ("tp", 4), ("ep", 16), ("zero", 1), ("seq", 8192), ("stage", 3)],
    [("model", MODELS[0]), ("pp", 8), ("recompute", "full"), ("mbs", 2), ("schedule", "1f1b")],
    [("model", MODELS[1]), ("dp", 1), ("tp", 1), ("pp", 2), ("ep", 1), ("mbs", 2), ("seq", 90),
     ("conventions", "transformers"), ("experts", "grouped"), ("stage", 1)],
    [("model", MODELS[1]), ("dp", 2), ("tp", 2), ("pp", 1), ("ep", 2), ("seq", 12), ("act_dtype", "fp32")],
]


def _assert_page_is_estimate(browser, page, controls):
    """The page at ``controls`` shows what memsym estimate prints for the same options: the stage, the parameters,
    the bytes (and one micro-batch's under a schedule)."""
    from derivations.assembly.device import estimate
    from memsym.cli import build_parser
    from memsym.commands import common
    _configure(browser, page, controls)
    err = browser.find_element("id", "error")
    assert not err.text, err.text
    args = build_parser("estimate").parse_args(["estimate", *_argv(controls)])
    common.finish(args)
    c = common.configuration(args)
    exact = estimate(c.model, c.layout, c.training, c.stage)
    assert int(browser.find_element("id", "v-stage").get_attribute("data-index")) == exact.stage.index
    for k in ("non_moe", "moe", "total"):
        assert _dom_exact(browser, f"params-{k}") == exact.params[k], k
    keys = ["weights", "gradients", "optimizer", "activations", "total", "activations_per_layer"]
    if exact.training.schedule:
        keys.append("activations_per_microbatch")
    for k in keys:
        assert _dom_exact(browser, f"bytes-{k}") == exact.bytes[k], k


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_the_page_equals_estimate_for_v4(browser, v4_page, i):
    _assert_page_is_estimate(browser, v4_page, CONFIGS[i])


@pytest.mark.parametrize("model", ["paper/models/deepseek-v4-flash.json", "paper/models/glm-5.json",
                                   "paper/models/deepseek-v3.2-exp.json"])
def test_the_default_page_offers_the_released_models(browser, page, model):
    """memsym page (no --model) offers DeepSeek's presets and the released models of every family (paper/models/):
    each chosen equals memsym estimate --model FILE."""
    _assert_page_is_estimate(browser, page, [("model", model), ("pp", 4), ("tp", 2), ("ep", 8)])
    if "v4" in model:  # the stage line names its CSA and HCA layers, as the command line does (layers 11-21)
        assert browser.find_element("id", "v-stage").text.endswith("11 MoE (6 CSA, 5 HCA))")


@pytest.mark.parametrize("extra", [[("fp8_activations", True)], [("recompute", "custom"), ("op-latent", True)]])
def test_the_page_refuses_what_changes_no_v4_tensor(browser, page, extra, capsys):
    """FP8 caching and recomputing an MLA operator change no V4 tensor: the page refuses them with the command line's
    own message (derivations/activations/shape.py check_options)."""
    from memsym.cli import main
    controls = [("model", "paper/models/deepseek-v4-flash.json"), *extra]
    _configure(browser, page, controls)
    shown = browser.find_element("id", "error").text
    assert main(["estimate", *_argv(controls)]) == 2
    said = capsys.readouterr().err.strip().removeprefix("memsym estimate: error: ")
    assert said and said in shown
