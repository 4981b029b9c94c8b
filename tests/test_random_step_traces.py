"""Random DeepSeek-family configurations, one whole training step profiled in each framework (``memsym trace
--step``, memsym/trace/step.py) and the preset's step peak (derivations/assembly/step_terms.py) predicted to the
byte, beside the per-layer and outside bytes (issue 43 item 6).

The draws are tests/test_random_traces.py's (:func:`test_random_traces.configs`: the same seed, printed in the
summary and in a failure; ``MEMSYM_RANDOM_SEED`` replays it), fewer of them (:data:`EXAMPLES`, a step trace takes
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
from test_random_traces import DRAWS, DSA, REFUSED, SEED, _have_trace, _path, command, configs, differences

#: Draws per run, each one step traced per framework.
EXAMPLES = int(os.environ.get("MEMSYM_RANDOM_STEP_EXAMPLES") or 6)

#: What a step draw keeps out, and why: {name: (what is set, the reason)}; :func:`restricted` applies them.
RESTRICTED = {
    "refused fields": ("attention_dropout 0 and, for transformers, moe_layer_freq as its refusal tells (REFUSED)",
                       "a preset that refuses a field predicts no step; the refusal is checked by the layer draws"),
    "mcore settings": ("Megatron-Core's router and loss as the DeepSeek recipe sets them (MCORE_RECIPE)",
                       "the moments' router state was derived there (paper/traces/STEP.md); a B_a router's "
                       "probabilities and the global loss's state are held otherwise, not derived yet"),
    "bf16": ("act_dtype bf16", "in FP32 the casts the moments count are no copies, the loop experts hold one b s h "
                               "buffer more and Megatron-Core's output layer's backward binds: not derived yet"),
    "untied": ("tie_word_embeddings false", "a tied head's weight gradient (V x h) waits in the engine's input "
                                            "buffer until the embedding's backward: no moment counts it yet"),
    "mtp": ("no MTP module in Megatron-Core", "the MTP block's final norm's backward binds: no moment yet"),
    "scaling": ("routed_scaling_factor given to Megatron-Core (2.5 when the draw leaves it out)",
                "its top-k scaling (moe_utils.py topk_routing_with_score_function: probs * scaling_factor) keeps the "
                "Python number as a wrapped float64, 8 bytes per MoE layer the moments count whatever the config"),
    "dsa full": ("no full recomputation of a DSA model (deepseek_v32, glm_moe_dsa)",
                 "the lightning indexer's recomputation binds (4.5-5.9 MB above the moments): not derived yet"),
}


def restricted(c: dict, training: dict):
    """({framework: config.json fields}, training) of a drawn (config, training) as :data:`RESTRICTED` says."""
    out, c = {}, dict(c, tie_word_embeddings=False)
    training = {f: dict(t, act_dtype="bf16", **({"settings": dict(MCORE_RECIPE)} if f == "mcore" else {}))
                for f, t in training.items()}
    for framework in training:
        out[framework] = dict(c, **{f: told for f, (refused, told) in REFUSED.items() if refused(framework, c)})
    if "mcore" in out:
        out["mcore"].update(num_nextn_predict_layers=0, routed_scaling_factor=c.get("routed_scaling_factor", 2.5))
    if c["model_type"] in DSA:
        training["transformers"]["recompute"] = "none"
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
@seed(SEED)
@settings(DRAWS, max_examples=EXAMPLES)
@given(draw=step_configs())
def test_random_config_step_peak_is_predicted(draw, record_property):
    """Every draw, one step profiled in each framework: per layer, outside and the step's peak, measured ==
    predicted (the peak's moment and where it was measured said on a failure)."""
    record_property("random_seed", SEED)
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
        pytest.fail(f"MEMSYM_RANDOM_SEED={SEED}: measured != predicted\n" + "\n".join(failures), pytrace=False)
