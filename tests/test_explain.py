"""derivations/assembly/explain.py: the words of ``memsym estimate`` add up to the numbers it prints."""
from __future__ import annotations

import re

import pytest

from derivations import config as cfg
from derivations.assembly.device import estimate
from derivations.assembly.explain import explain_params, explain_split


def _ints(text):
    return [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", text)]


@pytest.mark.parametrize("name, layout, stage", [
    ("deepseek-v3", cfg.Layout(), 1), ("deepseek-v3", cfg.Layout(), 0), ("deepseek-v3", cfg.Layout(), 15),
    ("deepseek-v2-lite", cfg.Layout(dp=8, tp=2, pp=3, ep=8), 2), ("deepseek-v2", cfg.Layout(dp=8, tp=4, pp=4, ep=8), 0),
])
def test_p_n_in_words_adds_up_to_p_n(name, layout, stage):
    est = estimate(cfg.PRESETS[name], layout, cfg.Training(), stage)
    line = explain_params(est)[0]
    assert line.startswith("  P_n = ")
    terms = line[len("  P_n = "):].split(" + ")
    layers_part = re.match(r"(\d+) layers? x \(MLA ([\d,]+)", terms[0])
    n, mla = int(layers_part.group(1)), int(layers_part.group(2).replace(",", ""))
    ln = _ints(terms[1])[0]  # "LN <n>)"
    total = n * (mla + ln)
    for t in terms[2:]:
        nums = _ints(t)
        total += nums[0] * nums[1] if "dense FFN" in t else nums[0]
    assert total == est.params["non_moe"]


def test_the_split_marks_the_reported_stage_once():
    est = estimate(cfg.PRESETS["deepseek-v3"], cfg.Layout(), cfg.Training(), 5)
    lines = explain_split(est)
    assert sum("this device" in line for line in lines) == 1
    assert "4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,1 layers" in lines[0]
