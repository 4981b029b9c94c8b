"""``memsym estimate --from-torchtitan FILE``: a torchtitan job config read as memsym's options
(derivations/config/torchtitan.py, memsym/commands/launch.py).

Expectations are written by hand from torchtitan's sources at 99fee810b7e253273ed8d1e10eb6c5f60ba69eff
(torchtitan/config/job_config.py defaults: local_batch_size 8, seq_len 2048, data_parallel_shard_degree -1,
activation_checkpoint mode 'selective' with selective_ac_option '2', dtype float32, mixed_precision_param bfloat16;
parallel_dims.py _validate; deepseek_v3/__init__.py deepseekv3_configs), or, for the run of paper/runs.toml, are
the hand translation its [runs.layout]/[runs.training]/[runs.model] record; never computed with the code under test."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from clirun import run  # tests/clirun.py

ROOT = Path(__file__).resolve().parent.parent
TITAN = [r for r in tomllib.loads((ROOT / "paper" / "runs.toml").read_text())["runs"] if r["framework"] == "torchtitan"]
RUN = TITAN[0]
RUN_FILE = str(ROOT / "paper" / "runs" / f"{RUN['id']}.toml")
MODEL = '[model]\nname = "deepseek_v3"\nflavor = "16B"\n'


def write(tmp_path, text, name="job.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def explained(capsys, *argv):
    code, out, err = run(capsys, "estimate", *argv, "--explain", "--json")
    assert code == 0, err
    data = json.loads(out)
    return {o["option"]: o["value"] for o in data["options"]}, data


def test_a_minimal_job_config_takes_torchtitans_defaults(tmp_path, capsys):
    path = write(tmp_path, MODEL + "[parallelism]\ndata_parallel_shard_degree = 4\nexpert_parallel_degree = 2\n")
    opts, data = explained(capsys, "--from-torchtitan", path)
    # the world is replicate 1 x shard 4 x CP 1 x TP 1 x PP 1 = 4 (every degree given or defaulted, shard not -1)
    assert opts == {"--conventions": "torchtitan", "--model": "deepseek-v2-lite", "--attention": "flash", "--dp": "4",
                    "--tp": "1", "--pp": "1", "--ep": "2", "--etp": "1", "--cp": "1", "--sp": "1", "--zero": "3",
                    "--mbs": "8", "--seq": "2048",
                    "--recompute": "none", "--weight-dtype": "bf16", "--grad-dtype": "fp32", "--master-dtype": "fp32",
                    "--optimizer-dtype": "fp32", "--act-dtype": "bf16", "--head-state": "paper"}
    origin = {o["option"]: o["from"] for o in data["options"]}
    # no [compile]: JobConfig Compile.enable False, so components/loss.py build_cross_entropy_loss keeps the eager loss
    assert "build_cross_entropy_loss" in origin["--head-state"]
    assert "torchtitan default 8" in origin["--mbs"] and "Training.local_batch_size" in origin["--mbs"]
    assert "torchtitan default 2048" in origin["--seq"]
    # selective with selective_ac_option '2' (every other block): memsym checkpoints all or none, said
    assert any("selective_ac_option '2'" in x for x in data["not_modelled"]), data["not_modelled"]


def test_shard_degree_minus_one_is_the_rest_of_the_world(tmp_path, capsys):
    path = write(tmp_path, MODEL + "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 2\n"
                                   "[activation_checkpoint]\nmode = \"full\"\n")
    code, _, err = run(capsys, "estimate", "--from-torchtitan", path)
    assert code == 2 and "--gpus" in err and len(err.strip().splitlines()) == 1, err
    opts, _ = explained(capsys, "--from-torchtitan", path, "--gpus", "16")
    # 16 / (TP 2) = 8 shards; SP = TP (SequenceParallel norms); EP 1: experts tensor-parallel (ETP = TP)
    assert (opts["--dp"], opts["--tp"], opts["--sp"], opts["--etp"], opts["--zero"], opts["--recompute"]) == \
           ("8", "2", "2", "2", "3", "full")


def test_hsdp_counts_one_replica_group(tmp_path, capsys):
    path = write(tmp_path, MODEL + "[parallelism]\ndata_parallel_replicate_degree = 2\n"
                                   "data_parallel_shard_degree = 4\n[training]\nlocal_batch_size = 2\n"
                                   "global_batch_size = 32\n")
    opts, data = explained(capsys, "--from-torchtitan", path)
    # 2 replicas of an FSDP group of 4: one group, ZeRO-3 over 4; the batch 32 = 2 x 4 x 2 x 2 steps: the group's 16
    assert (opts["--dp"], opts["--zero"], opts["--mbs"], opts["--global-batch"]) == ("4", "3", "2", "16")
    assert any("HSDP" in x for x in data["assumptions"])


def test_unknown_memory_keys_are_named_in_one_warning(tmp_path, capsys):
    path = write(tmp_path, '[model]\nname = "deepseek_v3"\nflavor = "16B"\nconverters = ["float8"]\n'
                 '[parallelism]\ndata_parallel_shard_degree = 8\n[compile]\nenable = true\n'
                 'components = ["model", "loss"]\n[training]\nfrobnicate = 1\n[optimizer]\nlr = 1e-4\n'
                 '[job]\ndump_folder = "x"\n'
                 '[quantize.linear.float8]\nfilter_fqns = ["output"]\n')
    code, out, err = run(capsys, "estimate", "--from-torchtitan", path)
    assert code == 0, err
    lines = [x for x in err.splitlines() if "warning" in x]
    assert len(lines) == 1, err
    for named in ("compile.enable", "model.converters", "training.frobnicate", "quantize.linear.float8.filter_fqns"):
        assert named in lines[0], lines[0]
    assert "optimizer.lr" not in err and "dump_folder" not in err


def _huge(p):
    return write(p, "# " + "x" * (5 * 2 ** 20) + "\n")


@pytest.mark.parametrize("text, named", [
    (MODEL + "[training]\nlocal_batch_size = \"eight\"\n", "local_batch_size = 'eight'"),
    (MODEL + "[activation_checkpoint]\nmode = \"partial\"\n", "mode = 'partial'"),
    (MODEL + "[activation_checkpoint]\nselective_ac_option = \"layer\"\n", "selective_ac_option"),
    ('[model]\nname = "deepseek_v3"\nflavor = "7B"\n', "flavor = '7B'"),
    ('[model]\nname = "llama3"\n', "name = 'llama3'"),
    ("parallelism = 3\n" + MODEL, "a job config's top level holds tables"),
    (MODEL + "[frobnicate]\nx = 1\n", "['frobnicate'] is not a section of torchtitan's JobConfig"),  # as torchtitan
    (MODEL + "[parallelism]\nexpert_parallel_degree = 3\ndata_parallel_shard_degree = 8\n", "expert_parallel_degree 3"),
    (MODEL + "[parallelism]\ndata_parallel_shard_degree = 4\n", "!= --gpus 8"),
    (MODEL + "[parallelism\n", "not a TOML job config"),
    (None, "a launch file has at most"),
])
def test_bad_job_configs_exit_2_with_one_line(tmp_path, capsys, text, named):
    path = _huge(tmp_path) if text is None else write(tmp_path, text)
    code, out, err = run(capsys, "estimate", "--from-torchtitan", path, "--gpus", "8")
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert named in err, err


def test_both_launch_files_are_refused_and_typed_options_win(tmp_path, capsys):
    path = write(tmp_path, MODEL + "[parallelism]\ndata_parallel_shard_degree = 8\n")
    code, _, err = run(capsys, "estimate", "--from-torchtitan", path, "--from-megatron", path)
    assert code == 2 and "together" in err and len(err.strip().splitlines()) == 1, err
    opts, data = explained(capsys, "--from-torchtitan", path, "--mbs", "2")
    assert opts["--mbs"] == "2"  # the typed value
    assert "the file's: 8" in next(o["from"] for o in data["options"] if o["option"] == "--mbs")


def test_a_flavor_unlike_every_preset_builds_its_config(tmp_path, capsys):
    # 671B: deepseek-v3's shape but no MTP module in torchtitan's model: built, not the preset
    path = write(tmp_path, '[model]\nname = "deepseek_v3"\nflavor = "671B"\n[parallelism]\n'
                           'data_parallel_shard_degree = 64\nexpert_parallel_degree = 64\n')
    opts, data = explained(capsys, "--from-torchtitan", path)
    model = {m["field"]: m["value"] for m in data["model"]}
    assert "--model" not in opts
    assert (model["hidden_size"], model["num_hidden_layers"], model["first_k_dense_replace"],
            model["n_routed_experts"], model["n_shared_experts"], model["num_experts_per_tok"],
            model["q_lora_rank"], model["vocab_size"], model["num_nextn_predict_layers"]) == \
           (7168, 61, 3, 256, 1, 8, 1536, 129280, 0)


@pytest.mark.parametrize("entry", TITAN, ids=[r["id"] for r in TITAN])
def test_the_runs_entry_resolves_to_its_hand_translation(capsys, entry):
    path = str(ROOT / "paper" / "runs" / f"{entry['id']}.toml")
    opts, data = explained(capsys, "--from-torchtitan", path, "--gpus", str(entry["gpus"]))
    assert opts["--model"] == entry["model"]["preset"]
    for k, v in {**entry["layout"], **entry["training"]}.items():
        assert opts["--" + k.replace("_", "-")] == str(v), (k, v, opts)
    # the flags the entry records are the file's, as torchtitan reads them (-1 shards: 8 over 8 GPUs)
    flags = entry["flags"]
    assert int(opts["--dp"]) == flags["parallelism.data_parallel_shard_degree"]
    assert int(opts["--ep"]) == flags["parallelism.expert_parallel_degree"]
    assert int(opts["--mbs"]) == flags["training.local_batch_size"]
    assert int(opts["--seq"]) == flags["training.seq_len"]
    assert data["not_modelled"] == []  # the compiled loss is the preset's (--head-state torchtitan)
    assert opts["--conventions"] == "torchtitan"


def test_the_explain_text_names_each_source(capsys):
    code, out, err = run(capsys, "estimate", "--from-torchtitan", RUN_FILE, "--gpus", "8", "--explain")
    assert code == 0, err
    assert "--recompute selective" in out and "selective_ac_option = 'op'" in out
    assert "--dp 8" in out and "data_parallel_shard_degree = -1" in out
    assert "--weight-dtype bf16" in out and "Training.mixed_precision_param" in out


def test_estimate_json_with_a_job_config_imports_no_sympy():
    import subprocess
    import sys
    code = ("import sys; from memsym.cli import main; main(['estimate', '--from-torchtitan', %r, '--gpus', '8', "
            "'--json']); assert 'sympy' not in sys.modules, 'sympy imported'" % RUN_FILE)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-400:]


def _fsdp2_states(ep: int):
    """(weights, gradients, optimizer) bytes of the 16B flavor on one of 8 GPUs under FSDP2 at the step's peak, by
    hand from deepseekv3_configs['16B'] (dim 2048, inter_dim 10944, moe_inter_dim 1408, 27 layers, 1 dense,
    16 heads, 64 experts, 2 shared, kv_lora_rank 512, no q_lora, nope 128, rope 64, v 128, vocab 102400) and
    apply_fsdp (llama4/infra/parallelize.py): the block (attention, norms, router, shared experts) over the 8
    ranks, the routed experts over dp_mod_ep = 8 / EP; FP32 sharded parameters and moments; two blocks
    all-gathered in BF16, the running block's BF16 unsharded gradients, the head's FP32 reduce-scatter input and
    its FP32 sharded gradients (zero_grad(set_to_none) frees the rest before the forward)."""
    h, vocab, expert = 2048, 102400, 3 * 2048 * 1408
    attn = h * 16 * 192 + h * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * h  # wq, wkv_a, wkv_b, wo
    norms = 2 * h + 512  # attention_norm, ffn_norm, kv_norm
    non_moe = 27 * (attn + norms) + 3 * h * 10944 + 2 * vocab * h  # layers, dense FFN, embedding, output
    block = 64 * h + 2 * expert  # router gate, shared experts
    routed = 64 // ep * expert
    shard = (non_moe + 26 * block) // 8 + 26 * routed // (8 // ep)
    unsharded = attn + norms + block + routed
    return (4 * shard + 2 * 2 * unsharded, 4 * vocab * h // 8 + 2 * unsharded + 4 * vocab * h, 8 * shard)


@pytest.mark.parametrize("rid, ep", [("torchtitan-dsv3-16b-fsdp8-ep8-lbs4", 8),
                                     ("torchtitan-dsv3-16b-fsdp8-ep1-fits", 1)])
def test_fsdp2_model_states_at_the_peak_by_hand(capsys, rid, ep):
    code, out, err = run(capsys, "estimate", "--from-torchtitan", str(ROOT / "paper" / "runs" / f"{rid}.toml"),
                         "--gpus", "8", "--json")
    assert code == 0, err
    got = json.loads(out)["bytes"]
    assert (got["weights"], got["gradients"], got["optimizer"]) == _fsdp2_states(ep)


@pytest.mark.parametrize("compiled,head", [("enable = false\ncomponents = [\"loss\"]", "paper"),
                                           ("enable = true\ncomponents = [\"model\"]", "paper"),
                                           ("enable = true\ncomponents = [\"loss\"]", None)])
def test_only_a_compiled_loss_takes_the_presets_head_state(tmp_path, capsys, compiled, head):
    # torchtitan components/loss.py build_cross_entropy_loss: torch.compile(loss_fn) iff compile.enable and "loss" in
    # compile.components; else cross_entropy(pred.float(), labels), whose FP32 log-softmax is kept
    path = write(tmp_path, MODEL + "[parallelism]\ndata_parallel_shard_degree = 8\n[compile]\n" + compiled + "\n")
    opts, _ = explained(capsys, "--from-torchtitan", path)
    assert opts.get("--head-state") == head


def test_fsdp2_implies_zero_3_and_a_lower_typed_zero_is_refused(capsys):
    # torchtitan parallelize.py apply_fsdp: fully_shard shards parameters, gradients and optimizer states (ZeRO-3)
    code, out, err = run(capsys, "estimate", "--conventions", "torchtitan", "--json")
    assert code == 0 and json.loads(out)["training"]["zero"] == 3, err
    for rank in ("fsdp2", "mfsdp"):
        code, _, err = run(capsys, "estimate", "--rank", rank, "--zero", "1")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--zero 1" in err, err
    code, _, err = run(capsys, "search", "--gpus", "64", "--conventions", "torchtitan", "--zero", "1,3")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--zero 1,3" in err, err
