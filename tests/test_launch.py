"""``memsym estimate --from-megatron FILE``: a Megatron-LM launch read as memsym's options
(derivations/config/launch.py, derivations/config/megatron.py, memsym/commands/launch.py).

Expectations are written from the fixtures' flags and Megatron-LM's defaults by hand (or, for the runs of
paper/runs.toml, are the hand translations recorded in its [runs.layout]/[runs.training]/[runs.model]),
never computed with the code under test."""
from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from derivations import config as cfg
from derivations.config.grammars import layer_pattern, pipeline_layout
from clirun import run  # tests/clirun.py

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "launch"
SCRIPT, YAML = str(DATA / "run.sh"), str(DATA / "model_config.yaml")
RUNS = [r for r in tomllib.loads((ROOT / "paper" / "runs.toml").read_text())["runs"]
        if r["framework"] == "megatron-core"]


def explained(capsys, *argv):
    code, out, err = run(capsys, "estimate", *argv, "--explain", "--json")
    assert code == 0, err
    data = json.loads(out)
    options = {o["option"]: o["value"] for o in data["options"]}
    return options, {m["field"]: m["value"] for m in data["model"] or []}, data


# ------------------------------------------------------------------------------------------ a shell script
def test_a_script_with_variables_arrays_continuations_and_torchrun(capsys):
    opts, model, data = explained(capsys, "--from-megatron", SCRIPT)
    # torchrun --nproc_per_node 8 --nnodes 2: 16 GPUs; TP 2 x PP 2: DP 4; ETP = TP (Megatron's default)
    assert {k: opts[k] for k in ("--dp", "--tp", "--pp", "--ep", "--etp", "--cp", "--sp")} == \
        {"--dp": "4", "--tp": "2", "--pp": "2", "--ep": "4", "--etp": "2", "--cp": "1", "--sp": "2"}
    assert "--layers-per-stage" not in opts and opts["--schedule"] == "1f1b" and "--vpp" not in opts
    assert (opts["--mbs"], opts["--global-batch"], opts["--seq"]) == ("2", "64", "2048")
    assert opts["--recompute"] == "full" and opts["--attention"] == "flash"
    assert opts["--bytes-per-param"] == "distributed"
    assert [opts[f"--{k}-dtype"] for k in ("weight", "grad", "master", "optimizer", "act")] == \
        ["bf16", "fp32", "fp32", "fp32", "bf16"]
    assert (opts["--conventions"], opts["--router-dtype"], opts["--aux-loss"], opts["--experts"],
            opts["--rope-tables"]) == ("mcore-te", "activation", "none", "alltoall", "shared")
    # the model: 1000 tokens padded to a multiple of 128 x TP 2 = 256: 1024; 2 shared experts of 256
    assert (model["hidden_size"], model["intermediate_size"], model["moe_intermediate_size"],
            model["num_hidden_layers"],
            model["first_k_dense_replace"], model["moe_layer_freq"], model["n_routed_experts"],
            model["n_shared_experts"], model["num_experts_per_tok"], model["q_lora_rank"], model["kv_lora_rank"],
            model["qk_nope_head_dim"], model["qk_rope_head_dim"], model["v_head_dim"], model["vocab_size"],
            model["tie_word_embeddings"], model["topk_method"], model["scoring_func"]) == \
        (512, 1536, 256, 8, 2, 1, 16, 2, 4, 256, 128, 64, 32, 64, 1024, False, "noaux_tc", "sigmoid")
    assert data["not_modelled"] == []
    assert opts["--gpus-per-node"] == "8"


def test_the_scripts_node_size_places_the_rings(tmp_path, capsys):
    """GPUS_PER_NODE=4 NNODES=4: torchrun --nproc_per_node 4 is a node of 4 GPUs. DP 4 of TP 2 (ranks 2 apart): two
    of its ranks on a node, so 16 of the ring's 32 channels leave it (10 + 10 MiB each, the rest 6 + 6 MiB)."""
    path = tmp_path / "run.sh"
    path.write_text(open(SCRIPT).read().replace("GPUS_PER_NODE:-8", "GPUS_PER_NODE:-4").replace("NNODES=2", "NNODES=4"))
    opts, _, _ = explained(capsys, "--from-megatron", str(path))
    assert opts["--gpus-per-node"] == "4" and opts["--dp"] == "4"
    code, out, err = run(capsys, "estimate", "--from-megatron", str(path), "--memory", "device", "--json")
    assert code == 0, err
    rings = {b["what"]: b["bytes"] for b in json.loads(out)["memory"]["buffers"]}
    assert rings["NCCL DP ring (32 channels, 16 across nodes)"] == 16 * 12 * 2 ** 20 + 16 * 20 * 2 ** 20


def test_a_script_estimates_and_typed_options_win(capsys):
    code, out, err = run(capsys, "estimate", "--from-megatron", SCRIPT, "--json")
    assert code == 0 and err == "", err
    base = json.loads(out)
    code, out, err = run(capsys, "estimate", "--from-megatron", SCRIPT, "--mbs", "1", "--tp", "1", "--explain",
                         "--json")
    assert code == 0, err
    opts = {o["option"]: o for o in json.loads(out)["options"]}
    assert opts["--mbs"]["value"] == "1" and "the file's: 2" in opts["--mbs"]["from"]  # the typed value shown
    assert opts["--dp"]["value"] == "8" and opts["--etp"]["value"] == "1" and opts["--sp"]["value"] == "1"
    code, out, err = run(capsys, "estimate", "--from-megatron", SCRIPT, "--mbs", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["bytes"]["total"] < base["bytes"]["total"]


def test_gpus_typed_beside_a_script_wins_over_torchrun(capsys):
    opts, _, _ = explained(capsys, "--from-megatron", SCRIPT, "--gpus", "32")
    assert opts["--dp"] == "8"


# ------------------------------------------------------------------------------------------ a model_config.yaml
def test_a_model_config_yaml(capsys):
    opts, model, data = explained(capsys, "--from-megatron", YAML, "--gpus", "8")
    assert {k: opts[k] for k in ("--dp", "--tp", "--pp", "--ep", "--etp", "--sp")} == \
        {"--dp": "8", "--tp": "1", "--pp": "1", "--ep": "2", "--etp": "1", "--sp": "1"}
    assert opts["--zero"] == "2" and "--bytes-per-param" not in opts  # Megatron-FSDP optim_grads
    assert opts["--attention"] == "eager" and opts["--recompute"] == "selective"  # core_attn, Megatron's default
    assert opts["--global-batch"] == "8"  # mbs x DP, Megatron's default
    assert opts["--grad-dtype"] == "bf16"  # --megatron-fsdp-main-grads-dtype auto: the parameters' dtype
    assert opts["--mtp"] == "True" and opts["--mtp-activations"] == "last-stage"
    # --ffn-hidden-size absent with --swiglu: int(4 x 256 x 2/3 / 64) x 64 = 640; no query compression; the
    # GPT-2 BPE vocabulary 50,257 padded to a multiple of 128: 50,304; --moe-layer-freq 2: layers 0 and 2
    assert (model["intermediate_size"], model["moe_intermediate_size"], model["q_lora_rank"], model["kv_lora_rank"],
            model["vocab_size"], model["first_k_dense_replace"], model["moe_layer_freq"], model["n_shared_experts"],
            model["tie_word_embeddings"], model["scoring_func"], model["topk_method"]) == \
        (640, 640, None, 64, 50304, 0, 2, 0, True, "softmax", "greedy")
    # --fp8-format hybrid without --fp8-recipe: Megatron's default recipe, delayed (transformer_config.py fp8_recipe)
    assert opts["--linear-recipe"] == "delayed" and "--quantized-param-gather" not in opts
    assert data["not_modelled"] == ["--moe-token-dispatcher-type allgather"]


def test_an_unmodelled_flag_is_one_warning_line(capsys):
    code, out, err = run(capsys, "estimate", "--from-megatron", YAML, "--gpus", "8", "--json")
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "--moe-token-dispatcher-type allgather" in lines[0], err
    assert "--fp8-format" not in err  # read: --linear-recipe delayed
    assert "--save" not in err and "--bf16" not in err  # ignored or read, never warned about
    json.loads(out)


# ------------------------------------------------------------------------------------------ the runs of paper/runs.toml
@pytest.mark.parametrize("entry", RUNS, ids=[r["id"] for r in RUNS])
def test_every_megatron_run_resolves_to_the_flags_it_uses(capsys, entry):
    """memsym estimate --from-megatron <its model_config.yaml> --explain gives the options of the entry's hand
    translation ([runs.layout], [runs.training], [runs.model]); where the reader reads more than the hand
    translation did (--no-rope-fusion: --rope-tables per-layer), that is said here."""
    path = ROOT / "paper" / "runs" / f"{entry['id']}.yaml"
    opts, model, data = explained(capsys, "--from-megatron", str(path), "--gpus", str(entry["gpus"]))
    for k, v in entry["layout"].items():
        want = ",".join(map(str, v)) if isinstance(v, list) else str(v)
        assert opts["--" + k.replace("_", "-")] == want, k
    assert "--layers-per-stage" in opts or "layers_per_stage" not in entry["layout"]
    training = dict(entry["training"])
    if training.pop("distributed_optimizer", False):
        assert opts["--bytes-per-param"] == "distributed"
    if training.pop("mtp", False):
        assert opts["--mtp"] == "True" and opts["--mtp-activations"] == "last-stage"
    offload = training.pop("offload_activations", None)
    if offload is not None and "--offload-activations" in opts:
        assert opts["--offload-activations"] == ",".join(offload)
    for k, v in training.items():
        want = ",".join(map(str, v)) if isinstance(v, list) else str(v)
        assert opts["--" + k.replace("_", "-")] == want, k
    # the FP8 runs' recipe as their [runs.flags] record it (Megatron's --fp8-recipe, --linear-recipe's values)
    flags = entry.get("flags", {})
    assert opts.get("--linear-recipe") == (flags.get("--fp8-recipe", "delayed") if "--fp8-format" in flags else None)
    opts.pop("--linear-recipe", None)
    # the allocator's options, from the file's ENV_VARS (read by --memory)
    env = yaml.safe_load(path.read_text()).get("ENV_VARS") or {}
    assert opts.pop("--alloc-conf", None) == env.get("PYTORCH_CUDA_ALLOC_CONF")
    # the step time's overlap switches, one per Megatron overlap flag the run's MODEL_ARGS hold
    args = yaml.safe_load(path.read_text()).get("MODEL_ARGS") or {}
    named = {"--overlap-grad-reduce": "grad-reduce", "--overlap-param-gather": "param-gather",
             "--overlap-moe-expert-parallel-comm": "ep", "--tp-comm-overlap": "tp", "--delay-wgrad-compute": "wgrad"}
    assert set(opts.pop("--overlap").removeprefix("megatron:").split(",")) - {""} == {n for f, n in named.items()
                                                                                      if f in args}
    # CUDA graphs through Transformer Engine, as the entry's flags record them (--cuda-graphs, derivations/assembly/
    # graphs.py)
    te = flags.get("--cuda-graph-impl") == "transformer_engine"
    assert opts.pop("--cuda-graphs", None) == (flags.get("--cuda-graph-modules") if te else None)
    assert opts.pop("--cuda-graph-warmup-steps", None) == (str(flags.get("--cuda-graph-warmup-steps")) if te else None)
    hand = {"layout": set(entry["layout"]), "training": set(entry["training"])}
    extra = {k for k in opts if k[2:].replace("-", "_") not in hand["layout"] | hand["training"]}
    assert extra <= {"--bytes-per-param", "--mtp", "--mtp-activations", "--conventions", "--router-dtype", "--aux-loss",
                     "--experts", "--rope-tables", "--swiglu", "--offload-activations", "--rank"}, extra
    # Megatron-FSDP's ZeRO-3 keeps its non-unit bucket gathered (--rank mfsdp); the distributed optimizer does not
    assert opts.get("--rank") == ("mfsdp" if entry.get("flags", {}).get("--use-megatron-fsdp") else None)
    # beyond the tables: the switches the run's own flags decide, as the entry's preset (mcore-te) sets them,
    # but the RoPE tables of --no-rope-fusion (every run but the DeepSeek-V3 proxy)
    preset = cfg.CONVENTION_PRESETS["mcore-te"]
    for flag in ("--router-dtype", "--aux-loss", "--swiglu"):
        assert opts[flag] == preset[flag[2:].replace("-", "_")], flag
    assert opts.get("--experts", preset["experts"]) == preset["experts"]
    assert opts["--rope-tables"] == ("shared" if "dsv3" in entry["id"] else "per-layer")
    spec = cfg.load_model(str(ROOT / "paper" / entry["model"]["config"]))
    from derivations.config.hfconfig import from_dict
    built = from_dict(model, "launch")
    assert replace(built, name=spec.name, source=spec.source) == spec


def test_memsym_runs_reads_every_megatron_run_through_its_arguments(capsys):
    code, out, err = run(capsys, "runs", "--json")
    assert code == 0, err
    for r in json.loads(out)["runs"]:
        if r["framework"] == "megatron-core":
            assert r["estimate_command"].startswith(f"memsym estimate --from-megatron paper/runs/{r['id']}.yaml "
                                                    f"--gpus {r['gpus']} "), r["estimate_command"]
            assert r["launch"]["file"] == f"paper/runs/{r['id']}.yaml"
        else:  # torchtitan's job config (tests/test_launch_torchtitan.py)
            assert r["framework"] == "torchtitan"
            assert r["estimate_command"].startswith(f"memsym estimate --from-torchtitan paper/runs/{r['id']}.toml "
                                                    f"--gpus {r['gpus']} "), r["estimate_command"]
            assert r["launch"]["file"] == f"paper/runs/{r['id']}.toml"


def test_the_runs_arguments_are_the_model_configs_verbatim():
    for entry in RUNS:
        text = (ROOT / "paper" / "runs" / f"{entry['id']}.yaml").read_text()
        assert entry["source"]["config"] in text and entry["source"]["revision"] in text
        assert "\nMODEL_ARGS:\n" in text


# ------------------------------------------------------------------------------------------ the small grammars
def test_moe_layer_freq_and_layout_grammars():
    assert layer_pattern("([0]*3+[1]*13)") == [0] * 3 + [1] * 13
    assert layer_pattern("([1]*3+[0]*1)*3") == [1, 1, 1, 0] * 3
    assert layer_pattern("[0,1]+[1]*2") == [0, 1, 1, 1]
    assert pipeline_layout("Et*3|(tt|)*6tmL") == ["Ettt"] + ["tt"] * 6 + ["tmL"]
    assert pipeline_layout("Et*2|(tt|)*5t|tmL") == ["Ett"] + ["tt"] * 5 + ["t", "tmL"]


# ------------------------------------------------------------------------------------------ launch files as published
_PROXY = str(ROOT / "paper" / "runs" / "mcore-proxy-h1024-selective-recompute.yaml")


def _edited(tmp_path, source, drop=(), add=(), replace_layout=None):
    """A copy of a run's model_config.yaml without the MODEL_ARGS lines starting with ``drop``, with ``add`` lines."""
    lines = [ln for ln in Path(source).read_text().splitlines() if not ln.strip().startswith(tuple(drop) or "\0")]
    if replace_layout is not None:
        lines = [f"  --pipeline-model-parallel-layout: {replace_layout}" if "layout:" in ln else ln for ln in lines]
    at = lines.index("MODEL_ARGS:") + 1
    path = tmp_path / "model_config.yaml"
    path.write_text("\n".join(lines[:at] + [f"  {x}" for x in add] + lines[at:]) + "\n")
    return str(path)


def test_a_layout_with_the_test_harness_shell_escapes(tmp_path, capsys):
    """Megatron-LM's functional tests wrote the layout escaped for their harness (310082a6 model_config.yaml of
    gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental: ``Et*3\\\\|\\\\(tt\\\\|\\\\)*6tmL``, a plain YAML
    scalar keeping both backslashes; _run_training.sh unescapes it with xargs then eval): read as the plain layout,
    3,2,2,2,2,2,2,1 decoder layers in 8 virtual stages, 9 and 7 per rank (counted by hand)."""
    esc = r"Et*3\\|\\(tt\\|\\)*6tmL # Et*3|(tt|)*6tmL"
    opts, _, data = explained(capsys, "--from-megatron", _edited(tmp_path, _PROXY, replace_layout=esc), "--gpus", "8")
    assert (opts["--layers-per-stage"], opts["--virtual-layers"], opts["--vpp"]) == ("9,7", "3,2,2,2,2,2,2,1", "4")


def test_an_mla_model_without_experts(tmp_path, capsys):
    """No --num-experts (TransformerConfig num_moe_experts None): every one of the 16 layers a dense SwiGLU MLP."""
    drop = ("--num-experts", "--moe-layer-freq", "--pipeline-model-parallel-layout")
    code, _, err = run(capsys, "estimate", "--from-megatron", _edited(tmp_path, _PROXY, drop=drop), "--gpus", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "num_experts must be non None" in err, err
    path = _edited(tmp_path, _PROXY, drop=drop + ("--expert-model-parallel-size", "--expert-tensor-parallel-size"))
    opts, model, _ = explained(capsys, "--from-megatron", path, "--gpus", "8")
    assert (model["first_k_dense_replace"], model["num_hidden_layers"], model["n_shared_experts"]) == (16, 16, 0)
    code, out, err = run(capsys, "estimate", "--from-megatron", path, "--gpus", "8")
    assert code == 0, err
    assert "(16 dense, 0 MoE)" in out


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8"])
def test_megatron_fsdp_with_an_fp8_recipe_is_read(tmp_path, capsys, recipe):
    """Megatron-FSDP optim_grads_params (ZeRO-3) with --fp8-recipe and --fp8-param-gather (as Megatron-LM's
    deepseek_proxy_fsdp_ep2_fsdp2 test writes them): read, the recipe named on the not-modelled line."""
    src = str(ROOT / "paper" / "runs" / "mcore-fsdp-proxy-ep2.yaml")
    path = _edited(tmp_path, src, add=("--fp8-format: e4m3", f"--fp8-recipe: {recipe}", "--fp8-param-gather: true"))
    opts, _, data = explained(capsys, "--from-megatron", path, "--gpus", "8")
    assert opts["--zero"] == "3" and "--linear-recipe" not in opts and "--quantized-param-gather" not in opts
    line = [m for m in data["not_modelled"] if "--fp8-recipe" in m]
    assert len(line) == 1 and recipe in line[0] and "--fp8-param-gather" in line[0] and "ZeRO-3" in line[0]


# ------------------------------------------------------------------------------------------ bad input
def _bad_script(tmp_path, text):
    path = tmp_path / "bad.sh"
    path.write_text(text)
    return str(path)


T = "torchrun --nproc-per-node 8 pretrain_gpt.py"


@pytest.mark.parametrize("make, named", [
    (lambda p: str(p / "missing.sh"), "cannot read the launch file"),
    (lambda p: _bad_script(p, f"{T} --num-layers $LAYERS --hidden-size 8\n"), "the variable LAYERS"),
    (lambda p: _bad_script(p, f"{T} --num-layers sixteen\n"), "--num-layers 'sixteen'"),
    (lambda p: _bad_script(p, "echo nothing to run\n"), "no command running a training script"),
    (lambda p: _bad_script(p, f"{T} --num-layers 4 --moe-layer-freq '__import__(1)'\n"), "--moe-layer-freq"),
    (lambda p: _bad_script(p, f"{T} --num-layers 'unterminated\n"), "unterminated"),
    (lambda p: _bad_script(p, f"X=$(nproc)\n{T} --num-layers $X\n"), "command substitution"),
    (lambda p: _bad_script(p, "python pretrain_gpt.py --num-layers 4\n"), "world size"),
    (lambda p: str(p), "not a regular file"),
])
def test_bad_launch_files_exit_2_with_one_line(tmp_path, capsys, make, named):
    code, out, err = run(capsys, "estimate", "--from-megatron", make(tmp_path))
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert named in err, err


def test_launch_options_need_a_launch_file(capsys):
    code, _, err = run(capsys, "estimate", "--explain")
    assert code == 2 and "--from-megatron" in err and len(err.strip().splitlines()) == 1


def test_a_yaml_without_model_args_or_with_aliases_is_refused(tmp_path, capsys):
    for text, named in (("A: 1\n", "MODEL_ARGS"),
                        ("MODEL_ARGS:\n  --num-layers: &n 4\n  --hidden-size: *n\n", "aliases"),
                        ("MODEL_ARGS: [\n", "not a YAML file")):
        path = tmp_path / "model_config.yaml"
        path.write_text(text)
        code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err


def test_estimate_json_with_a_launch_imports_no_sympy():
    import subprocess
    import sys
    code = ("import sys; from memsym.cli import main; main(['estimate', '--from-megatron', %r, '--json']); "
            "assert 'sympy' not in sys.modules, 'sympy imported'" % SCRIPT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_a_script_that_doubles_its_variables_is_refused_quickly(tmp_path, capsys):
    """Variables doubled line by line (2^39 x 16 characters if expanded) stop at the expansion cap, one line (no
    clock here: without the cap the run does not end)."""
    lines = ["A0=abcdefghijklmnop"] + [f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, 40)]
    path = tmp_path / "dbl.sh"
    path.write_text("\n".join(lines + ["torchrun pretrain_gpt.py --num-layers 4 --save $A39"]) + "\n")
    code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
    assert code == 2 and "expands to more than" in err and len(err.strip().splitlines()) == 1, err


def test_a_long_value_read_on_many_lines_is_refused_for_the_whole_file(tmp_path, capsys):
    """Each statement under the per-statement cap, the file over the whole-file one: a 60,000-character value read
    on 1,000 short lines (about 0.07 s a line without the file's cap: minutes) is one line naming the file."""
    lines = ["V=" + "x" * 60000] + [f'A{i}="$V"' for i in range(1000)]
    path = tmp_path / "long.sh"
    path.write_text("\n".join(lines + ["torchrun pretrain_gpt.py --num-layers 4"]) + "\n")
    code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
    assert code == 2 and "in all" in err and str(path) in err and len(err.strip().splitlines()) == 1, err


def test_a_yaml_nested_too_deeply_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("MODEL_ARGS:\n  --x: " + "[" * 100000 + "]" * 100000 + "\n")
    code, _, err = run(capsys, "estimate", "--from-megatron", str(path), "--gpus", "8")
    assert code == 2 and "nested too deeply" in err and len(err.strip().splitlines()) == 1, err
