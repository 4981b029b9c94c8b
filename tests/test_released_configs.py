"""Every released model's config in paper/models/ (each with its ``_source``): ``memsym params --json`` equals
transformers' own model built on the meta device from the same config, to the parameter (the oracle: the modules
transformers 5.24 builds, never memsym's terms), and the total is the published size.  The classes are those the
tracer builds for the model_type (memsym/trace/hf.py _classes, trace.toml; a wrapper such as Kimi K2.5 by its language
model).  Runs when memsym[trace] is installed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: file -> its published total (value, unit): what the release says, truncated (671B) or rounded (1.6T); the main
#: model without MTP (transformers builds none)
RELEASED = {
    "deepseek-v3.2-exp.json": (671, 10 ** 9),   # DeepSeek-V3.2-Exp: 671B (685B with MTP)
    "deepseek-v4-flash.json": (284, 10 ** 9),   # DeepSeek-V4-Flash: about 284B
    "deepseek-v4-pro.json": (16, 10 ** 11),     # DeepSeek-V4-Pro: about 1.6T
    "glm-5.json": (744, 10 ** 9),               # GLM-5: 744B
    "kimi-k2.json": (1026, 10 ** 9),            # Kimi K2: 1.026T
    "kimi-k2.5.json": (1026, 10 ** 9),          # Kimi K2.5's language model: Kimi K2's
}


def _params(path):
    out = subprocess.run([sys.executable, "-m", "memsym", "params", "--model", str(path), "--json", "--accounting",
                          "checkpoint"], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout)


def _meta(data: dict):
    """(parameters, buffers a checkpoint stores: the routing biases) of transformers' model of ``data``."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memsym.trace.hf import _classes
    if data["model_type"] == "kimi_k25":  # the language model (Kimi_K25Config's text_config: DeepSeek-V3's code)
        data = data["text_config"]
    keep = {k: v for k, v in data.items() if not k.startswith("_") and k not in ("architectures", "model_type")}
    config_class, model_class = _classes(data["model_type"])
    conf = config_class(**keep)
    with torch.device("meta"):
        model = model_class(conf)
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    return sum(p.numel() for p in model.parameters()), bias


def test_every_released_config_is_listed():
    listed = {p.name for p in (ROOT / "paper" / "models").glob("*.json") if not p.name.startswith("mcore-")}
    assert listed == set(RELEASED)
    for name in listed:
        assert "_source" in json.loads((ROOT / "paper" / "models" / name).read_text())


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_params_equal_the_meta_device_model(name):
    path = ROOT / "paper" / "models" / name
    data = json.loads(path.read_text())
    total, bias = _meta(data)
    got = _params(path)
    # the checkpoint accounting: every parameter and the routing biases (buffers a checkpoint stores)
    assert got["total"] == total + bias, (got["total"], total, bias)
    value, unit = RELEASED[name]
    assert abs(total / unit - value) < 1  # within the published figure's last digit (truncated or rounded)
