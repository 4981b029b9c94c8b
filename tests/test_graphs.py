"""--cuda-graphs (issue 46 item 4): CUDA graphs captured through Transformer Engine.  The expectations are the
static tensors' shapes as Megatron-LM d98e8a64 creates them (megatron/core/transformer/module.py and
transformer_layer.py get_layer_static_inputs) and Adam's state as torch.optim keeps it, written out here."""
from __future__ import annotations

import json

import pytest

from clirun import run

RUN = "paper/runs/mcore-proxy-h512-attn-cudagraph-fp8.yaml"
BASE = ("estimate", "--from-megatron", RUN, "--gpus", "8", "--conventions", "mcore-te", "--stage", "1", "--json")


def _stage(capsys, *extra):
    code, out, err = run(capsys, *BASE, *extra)
    assert code == 0, err
    return json.loads(out)


def test_the_launch_file_sets_attention_graphs_captured_before_step_1(capsys):
    d = _stage(capsys)
    b = d["bytes"]
    # --micro-batch-size 4 --seq-length 4096 --hidden-size 512, TP 2 with --sequence-parallel, CP 1:
    hidden = (4096 // 2) * 4 * 512 * 2  # torch.ones((slen_per_cptp, micro_batch_size, hidden_size), torch.bfloat16)
    mask = 4 * 1 * 4096 * 4096  # the causal mask (micro_batch_size, 1, slen_per_cp, seq_length), bool
    per = 2 * hidden + mask  # hidden states in, the layer's output out, the mask (attn is captured)
    assert b["graphs"] % per == 0 and b["graphs"] // per == 14  # the last rank's held layer micro-batches
    assert d["terms"]["step"] == "step.graph.capture" and any("CUDA graphs of attn" in a for a in d["assumptions"])


def test_a_capture_after_warm_up_steps_holds_adam_moments(capsys):
    def of(warmup):
        return _stage(capsys, "--cuda-graph-warmup-steps", warmup)["bytes"]
    cold, warm = of("0"), of("3")
    # torch.optim.Adam: exp_avg and exp_avg_sq in the FP32 main parameter's dtype: 8 of the 12 optimizer bytes
    assert warm["step_total"] - cold["step_total"] == warm["optimizer"] * 8 // 12
    assert warm["graphs"] == cold["graphs"] and warm["graph_pool"] == cold["graph_pool"]


def test_the_pool_is_reserved_beside_the_step(capsys):
    d = _stage(capsys, "--memory", "reserved")
    m = d["memory"]
    assert m["cuda_graph_pool"] >= d["bytes"]["graph_pool"]
    assert m["reserved"] > m["cuda_graph_pool"] and m["cuda_graph_pool"] % (2 << 20) == 0


@pytest.mark.parametrize("flags,read", [
    ({"--cuda-graph-impl": "transformer_engine", "--cuda-graph-modules": "attn moe"}, "attn,moe"),
    ({"--external-cuda-graph": None, "--cuda-graph-scope": "full"}, "layer"),
    ({"--cuda-graph-impl": "transformer_engine"}, "layer"),
    ({"--cuda-graph-impl": "local", "--cuda-graph-modules": "attn"}, None),
    ({"--cuda-graph-impl": "transformer_engine", "--cuda-graph-modules": "moe_router"}, None),
])
def test_megatron_graph_flags_are_read_or_named_not_modelled(flags, read):
    from derivations.config.launch import Launch
    from derivations.config.megatron import resolve
    launch = Launch("x.sh", {"--num-layers": ("2",), "--micro-batch-size": ("1",), "--seq-length": ("8",),
                             **{k: tuple((v or "").split()) for k, v in flags.items()}})
    r = resolve(launch, gpus=1, build_model=False, known=("cuda_graphs",))
    assert r.options.get("cuda_graphs") == read
    assert any("--cuda-graph" in u for u in r.unmodelled) == (read is None)


@pytest.mark.parametrize("extra, says", [
    (("--cuda-graphs", "mamba"), "mamba"), (("--cuda-graphs", "layer,attn"), "layer"),
    (("--cuda-graphs", "attn,attn"), "attn"), (("--cuda-graph-warmup-steps", "0"), "--cuda-graphs"),
    (("--cuda-graph-warmup-steps", "-1"), "--cuda-graph-warmup-steps"),
    # with --cuda-graphs given, the step count's own bound refuses (0..2^20), not the missing partner option
    (("--cuda-graphs", "attn", "--cuda-graph-warmup-steps", "-1"), "non-negative"),
    (("--cuda-graphs", "attn", "--cuda-graph-warmup-steps", str(2 ** 20 + 1)), "0..1048576")])
def test_bad_graph_options_are_refused_on_one_line(capsys, extra, says):
    code, out, err = run(capsys, "estimate", "--conventions", "mcore-te", *extra)
    assert code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err and not out


def test_graphs_outside_megatron_cores_layers_are_refused(capsys):
    code, _, err = run(capsys, "estimate", "--model", "deepseek-v3", "--cuda-graphs", "attn", "--offload-activations",
                       "core_attn", "--conventions", "mcore-te")
    assert code == 2 and "--cuda-graphs" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [("fit", "--hbm", "80GiB"), ("sensitivity",), ("report", "--out", "unused")])
def test_commands_of_the_closed_form_refuse_graphs(capsys, command):
    code, _, err = run(capsys, *command, "--cuda-graphs", "attn")
    assert code == 2 and "--cuda-graphs" in err and len(err.strip().splitlines()) == 1, err
