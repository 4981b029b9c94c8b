"""Random DeepSeek-family configurations, one whole training step profiled in each framework (``memsym trace
--step``, memsym/trace/step.py) and the preset's step peak (derivations/assembly/step_terms.py) predicted to the
byte, beside the per-layer and outside bytes (issue 43 item 6).

The draws are tests/test_random_traces.py's (:func:`test_random_traces.configs`, at :data:`STEP_SEED`, printed in
a failure), fewer of them (:data:`EXAMPLES`, a step trace takes
5-40 s on a CI core), each restricted where the preset has no moment yet for what the step then holds
(:data:`RESTRICTED`, each with its reason), and traced with ``step=True``: measured == predicted per layer,
outside the layers and at the step's peak.
"""
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from memsym.trace.inputs import MCORE_RECIPE
from test_random_traces import DRAWS, DSA, REFUSED, _have_trace, _path, command, configs, differences

#: Draws per run, each one step traced per framework.
EXAMPLES = int(os.environ.get("MEMSYM_RANDOM_STEP_EXAMPLES") or 6)
#: The step draws' seed: 11 unless MEMSYM_RANDOM_STEP_SEED (or MEMSYM_RANDOM_SEED) names another.  Not drawn afresh
#: on every run as the layer draws are: other seeds may still find peaks no moment covers (issue 43 item 6; the seeds
#: run, their results and the peaks still open are listed in paper/traces/STEP.md, "Random step draws").
STEP_SEED = int(os.environ.get("MEMSYM_RANDOM_STEP_SEED") or os.environ.get("MEMSYM_RANDOM_SEED") or 11)

#: What a step draw keeps out, and why: {name: (what is set, the reason)}; :func:`restricted` applies them.
RESTRICTED = {
    "refused fields": ("attention_dropout 0 and, for transformers, moe_layer_freq as its refusal tells (REFUSED)",
                       "a preset that refuses a field predicts no step; the refusal is checked by the layer draws"),
    "mcore settings": ("Megatron-Core's router and loss as the DeepSeek recipe sets them (MCORE_RECIPE)",
                       "the moments' router state was derived there (paper/traces/STEP.md); a B_a router's "
                       "probabilities and the global loss's state are held otherwise, not derived yet"),
    "bf16 mcore": ("act_dtype bf16 for Megatron-Core", "in FP32 its core attention's backward through the scores "
                   "buffer (CopySlices, AsStridedBackward0) holds four FP32 b n_h s^2 tensors and its forward no "
                   "FP32 copies of the scores (seed 12345: 405,956 B above the forward moment): not derived yet"),
    "fp32 full": ("transformers' FP32 draws without recomputation", "under full recomputation in FP32 with loop "
                  "experts the rebuild's end is predicted 173,016 B above the peak (seed 10, b 2 s 125; grouped: "
                  "exact, seed 1): not derived yet"),
    "no dsa": ("a deepseek_v32 or glm_moe_dsa draw traced as deepseek_v3 (its indexer fields dropped)",
               "the lightning indexer's forward binds in transformers (5 MB above the moments at s 384): "
               "no moment yet"),
    "loop full": ("transformers' loop experts without recomputation (a loop draw under full recomputation runs none)",
                  "inside the recomputed expert loop the last expert's FP32 routing-weight product binds above the "
                  "moments (seed 9, b 2 s 101, no shared experts: 234,784 B): not derived yet"),
    "mcore full": ("no full recomputation in Megatron-Core",
                   "its recomputed forward may route a token to another expert on this CPU (BF16 router ties; seed 11 "
                   "in CI: the rebuild's MLP 147,456 B above its moment, exact here): compared routing-free in "
                   "test_step_traces.py, not yet here"),
}


def restricted(c: dict, training: dict):
    """({framework: config.json fields}, training) of a drawn (config, training) as :data:`RESTRICTED` says."""
    out = {}
    if c["model_type"] in DSA:
        c = {k: v for k, v in c.items() if not k.startswith("index")}
        c["model_type"] = "deepseek_v3"
    training = {f: dict(t, **({"settings": dict(MCORE_RECIPE), "act_dtype": "bf16"} if f == "mcore" else {}))
                for f, t in training.items()}
    hf = training.get("transformers", {})
    if hf.get("experts") == "loop" or hf.get("act_dtype") == "fp32":
        hf["recompute"] = "none"
    if training.get("mcore", {}).get("recompute") == "full":
        training["mcore"]["recompute"] = "none"
    for framework in training:
        out[framework] = dict(c, **{f: told for f, (refused, told) in REFUSED.items() if refused(framework, c)})
    return out, training


@st.composite
def step_configs(draw):
    """A draw of :func:`configs`, restricted (:func:`restricted`)."""
    return restricted(*draw(configs()))


def trace_step(framework: str, path: str, t: dict) -> dict:
    """``memsym trace --step --json``'s result, in this process."""
    import types

    from memsym.trace import hf, mcore
    from memsym.trace.compare import result
    rec, info = (hf if framework == "transformers" else mcore).run(path, step=True, **t)
    given = {k: v for k, v in t.items() if k != "settings"}
    return result(types.SimpleNamespace(framework=framework, conventions=None, tensors=False, model=path, **given,
                                        **t.get("settings", {})), rec, info)


@pytest.mark.trace
@pytest.mark.skipif(not _have_trace(), reason="needs pip install 'memsym[trace]'")
@seed(STEP_SEED)
@settings(DRAWS, max_examples=EXAMPLES)
@given(draw=step_configs())
def test_random_config_step_peak_is_predicted(draw, record_property):
    """Every draw, one step profiled in each framework: per layer, outside and the step's peak, measured ==
    predicted (the peak's moment and where it was measured said on a failure)."""
    record_property("random_seed", STEP_SEED)
    cs, training = draw
    failures = []
    for framework, t in training.items():
        path = _path()
        Path(path).write_text(json.dumps(cs[framework], indent=2))
        try:
            out = trace_step(framework, path, t)
            bad = differences(out)
            st_, p = out["step"], out["step"]["predicted"]
            if p is None or p["peak"] != st_["peak"]:
                at = st_["at"]
                bad.append((f"step peak (predicted at {p and p['moment']}; measured in the {at['phase']}, "
                            f"{at['node']} of {at['module']})", st_["peak"], p and p["peak"]))
        except Exception as exc:  # a framework refusing a drawn config is a failing draw too: say which
            bad = [("trace", f"{type(exc).__name__}: {exc}", "a measurement")]
        if bad:
            rows = "\n".join(f"    {w}: measured {m}, predicted {p}" for w, m, p in bad)
            failures.append(f"{framework}: {command(framework, path, t)} --step\n{rows}\n{path}:\n"
                            f"{json.dumps(cs[framework], indent=2)}")
    if failures:
        pytest.fail(f"MEMSYM_RANDOM_STEP_SEED={STEP_SEED}: measured != predicted\n" + "\n".join(failures),
                    pytrace=False)
