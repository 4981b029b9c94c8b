"""Transformer Engine's quantized linear layers (derivations/config/quantization.py, derivations/assembly/quantized.py,
``--linear-recipe``, ``--quantized-param-gather``, the Megatron reader's FP8/FP4 flags).

Expectations by hand: the formats' bytes from the recipe definitions (TE recipe/__init__.py: values, block sizes,
scale dtypes), the pieces at the FP8 functional test's proxy (h 1024, q/kv LoRA 1536/512, 32 experts top-4 of
h_E 1024, one shared expert, dense FFN 4096, vocabulary 51,712; TP2 SP2 PP2 EP4, b 4, s 4096) from which TE module
saves which tensor (linear.py, layernorm_linear.py, grouped_linear.py; Megatron's TE spec)."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from derivations import config as cfg
from derivations import evaluate as ev
from derivations.assembly import quantized
from derivations.assembly.device import estimate
from derivations.config import quantization as qz
from derivations.config.switches import with_preset
from memsym.cli import main

ROOT = Path(__file__).resolve().parent.parent
b, s, h, SP, TP = 4, 4096, 1024, 2, 2
D_LAT, H_E, H_F, N, NR, V = 1536 + 512, 1024, 4096, 32, 4, 51712


@pytest.mark.parametrize("name, inp, weight", [
    ("delayed", 1, 2),                                       # FP8 values, one FP32 scale per tensor (not counted)
    ("tensorwise", 1, 2),                                    # Float8: _data and _transpose on Hopper
    ("blockwise", 1 + Fraction(4, 128), 2 * (1 + Fraction(4, 128 * 128))),  # FP32 per 1x128 / per 128x128 block
    ("mxfp8", 1 + Fraction(1, 32), 2 * (1 + Fraction(1, 32))),              # one E8M0 byte per 32 values
    ("nvfp4", Fraction(1, 2) + Fraction(1, 16), 2 * (Fraction(1, 2) + Fraction(1, 16))),  # E2M1 + E4M3 per 16
])
def test_bytes_per_element_of_each_format(name, inp, weight):
    assert qz.recipe(name).input_bytes == inp and qz.recipe(name).weight_bytes == weight


def proxy(recipe="tensorwise", **kw):
    model = cfg.load_model(str(ROOT / "paper" / "models" / "mcore-proxy-h1024-l16-d1-mtp1.json"))
    layout = cfg.Layout(dp=2, tp=2, pp=2, ep=4, etp=1, cp=1, sp=2)
    t = with_preset(cfg.Training(mbs=b, seq=s, schedule="interleaved", vpp=4, microbatches=4), "mcore-te")
    t = replace(t, attention="eager", conventions=replace(t.conventions, mtp_activations="last-stage", mtp=True),
                **kw)
    t = t.with_bytes_convention("distributed")
    return model, layout, (replace(t, linear_recipe=recipe) if recipe else t)


#: one layer micro-batch's change under tensorwise (1 B for B_a = 2 B), by hand
MLA = -b * s * D_LAT // SP                 # the up-projections' fused norm output (on the SP shard); the two
#                                            down-projections' copies of 1 B replace one B_a tensor: 0; linear_proj
#                                            keeps its BF16 input (save_original_input)
#: the routed experts' tokens: each EP rank routes its own sequence-parallel shard of b s / SP tokens
#: (TopKRouter.forward) and receives what its EP peers send its local experts, b s N_r / SP token copies balanced
#: (Megatron-LM d98e8a64 megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess,
#: output_splits; the mcore-te preset's routed_tokens = "dispatch")
MOE = (+b * s * h // SP                    # the shared experts' fc1 copy of the router input
       - b * s * NR // SP * h              # grouped fc1's input, b s N_r / SP token copies
       - b * s * NR // SP * H_E            # grouped fc2's input (the product)
       - b * s * H_E)                      # the shared expert's fc2 input
DENSE = -b * s * h // SP - b * s * H_F // TP  # dense fc1's fused norm output, fc2's input
EH = -b * s * 2 * h // SP                  # MTP eh_proj's input


def test_the_pieces_at_the_proxy_by_hand():
    model, layout, t = proxy()
    values = ev.derived(cfg.named(model, layout, t, cfg.stage(model, layout, 1)))
    per = quantized.per_layer(model, t, values)
    assert per == {"dense": MLA + DENSE, "moe": MLA + MOE, "head": (MLA + MOE) + EH}
    # delayed: linear_proj saves its quantized input instead of the BF16 attention output (eager)
    delayed = quantized.per_layer(model, replace(t, linear_recipe="delayed"), values)
    assert delayed["moe"] - per["moe"] == -b * s * 16 * 128


def test_the_device_by_hand():
    model, layout, t = proxy()
    bf16, fp8 = estimate(model, layout, proxy(None)[2], 1), estimate(model, layout, t, 1)
    held = sum(n * (c.dense * (MLA + DENSE) + c.moe * (MLA + MOE)) for c, n in fp8.chunks)
    assert fp8.bytes["activations"] - bf16.bytes["activations"] == held + fp8.head_inflight * (MLA + MOE + EH)
    # TE's weight copies: every parameter on the device but norms, embedding copy, head and routers, 2 B each;
    # stage 1 holds layers 8-15 and the MTP layer (9 MoE layers: norms h, h, d_cq, d_c each; routers N x h)
    P = fp8.params["total"]
    linear = P - 9 * (2 * h + D_LAT) - 2 * V * h // TP - 9 * N * h
    assert fp8.bytes["weights"] - bf16.bytes["weights"] == 2 * linear
    assert fp8.term_ids["weights"].endswith("+ state.quantized.tensorwise")
    assert fp8.term_ids["activations"].endswith("+ act.quantized.tensorwise")
    gathered = estimate(model, layout, replace(t, quantized_params=True), 1)
    assert gathered.bytes["weights"] - bf16.bytes["weights"] == 2 * linear - 2 * linear  # FP8 params + transposes


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("extra, needle", [
    (("--conventions", "mcore-te", "--linear-recipe", "tensorwise", "--fp8-activations"), "--fp8-activations"),
    (("--conventions", "mcore-te", "--quantized-param-gather"), "give --linear-recipe"),
    (("--linear-recipe", "mxfp8"), "--conventions mcore-te"),
    (("--conventions", "mcore-te", "--linear-recipe", "nvfp4", "--zero", "3"), "ZeRO-3"),
    (("--conventions", "mcore-te", "--linear-recipe", "delayed", "--offload-activations", "core_attn"),
     "not modelled together"),
])
def test_refused_on_one_line(capsys, extra, needle):
    code, err = run(capsys, "estimate", *extra)
    assert code == 2 and len(err) == 1 and needle in err[0], err


def _yaml(tmp_path, *flags):
    path = tmp_path / "model_config.yaml"
    base = (ROOT / "paper" / "runs" / "mcore-proxy-h1024-tp2pp2vpp4ep4.yaml").read_text()
    path.write_text(base.replace("MODEL_ARGS:\n", "MODEL_ARGS:\n" + "".join(f"  {f}\n" for f in flags), 1))
    return str(path)


def test_the_megatron_flags(tmp_path, capsys):
    import json
    code = main(["estimate", "--from-megatron", _yaml(tmp_path, "--fp4-format: e2m1", "--fp4-param-gather: true"),
                 "--gpus", "8", "--explain", "--json"])
    opts = {o["option"]: o["value"] for o in json.loads(capsys.readouterr().out)["options"]}
    assert code == 0 and opts["--linear-recipe"] == "nvfp4" and opts["--quantized-param-gather"] == "True"
    code, err = run(capsys, "estimate", "--from-megatron", _yaml(tmp_path, "--fp8-param-gather: true"), "--gpus", "8")
    assert code == 2 and len(err) == 1 and "--fp8-param-gather without --fp8-format" in err[0], err
