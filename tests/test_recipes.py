"""Recipes: --recipe deepseek-v3 (the DeepSeek-V3 report's own training) and --recipe paper."""
import json
import tomllib
from pathlib import Path


from derivations.config.recipes import RECIPES
from derivations import config as cfg
from memsym.cli import build_parser, main
from memsym.commands import common


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_deepseek_v3_recipe_states_the_reports_layout_and_choices(capsys):
    d = run_json(capsys, "estimate", "--recipe", "deepseek-v3")
    lay, tr = d["layout"], d["training"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["ep"], lay["etp"], lay["cp"]) == (128, 1, 16, 64, 1, 1)
    assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == 2048          # 2048 H800 GPUs
    assert tr["zero"] == 1 and tr["schedule"] == "dualpipe" and tr["seq"] == 4096
    assert tr["recompute"].startswith("custom:") and {"norm", "mla_up"} <= set(tr["recompute"][7:].split(","))
    assert tr["fp8_activations"] is True
    by = tr["bytes_per_element"]
    assert (by["B_1"], by["B_2"], by["B_m"], by["B_g"]) == (2, 2, 4, 4)   # BF16 moments, FP32 master and grads
    assert d["inflight_microbatches"] == lay["pp"] + 1                    # DualPipe, Table 2
    assert d["device"]["name"] == "H800" and d["device"]["hbm"] == 80 * 2 ** 30


def test_deepseek_v3_recipe_lists_its_assumptions(capsys):
    d = run_json(capsys, "estimate", "--recipe", "deepseek-v3")
    text = " ".join(d["assumptions"]).lower()
    for needle in ("micro-batch size", "micro-batches per step", "in flight", "pp + 1", "flash"):
        assert needle in text, needle


def test_recipe_weights_double_under_dualpipe(capsys):
    a = run_json(capsys, "estimate", "--recipe", "deepseek-v3", "--schedule", "1f1b", "--stage", "1")
    b = run_json(capsys, "estimate", "--recipe", "deepseek-v3", "--stage", "1")
    assert b["bytes"]["weights"] == 2 * a["bytes"]["weights"]


def test_typed_options_override_the_recipe_in_any_order(capsys):
    for argv in (["--recipe", "deepseek-v3", "--mbs", "2", "--zero", "2"], ["--mbs", "2", "--zero", "2", "--recipe",
                                                                             "deepseek-v3"]):
        d = run_json(capsys, "estimate", *argv)
        assert d["training"]["mbs"] == 2 and d["training"]["zero"] == 2 and d["layout"]["ep"] == 64
        assert not any("micro-batch size b = 1" in a for a in d["assumptions"])


def test_a_typed_global_batch_derives_m_over_the_recipes(capsys):
    """The recipe's m = 120 gives way to --global-batch: m = G / (DP b) = 7680 / (128 x 1) = 60; both typed: refused."""
    d = run_json(capsys, "estimate", "--recipe", "deepseek-v3", "--global-batch", "7680")
    assert d["training"]["microbatches"] == 60 and d["training"]["schedule"] == "dualpipe"
    assert not any("micro-batches per step" in a for a in d["assumptions"])
    assert main(["estimate", "--recipe", "deepseek-v3", "--global-batch", "7680", "--microbatches", "60"]) == 2
    assert "not both" in capsys.readouterr().err


def test_paper_recipe_is_the_default(capsys):
    base = run_json(capsys, "estimate")
    paper = run_json(capsys, "estimate", "--recipe", "paper")
    assert paper["bytes"] == base["bytes"] and paper["layout"] == base["layout"]
    assert paper["assumptions"] and not base["assumptions"]


def test_recipe_text_prints_the_peak_against_the_h800(capsys):
    assert main(["estimate", "--recipe", "deepseek-v3"]) == 0
    out = capsys.readouterr().out
    assert "H800 (80 GiB)" in out and "assumptions:" in out and "per-GPU peak" in out


def test_a_recipe_resolves_to_what_recipes_toml_states():
    with open(Path(cfg.__file__).with_name("recipes.toml"), "rb") as fh:
        opts = tomllib.load(fh)["deepseek-v3"]["options"]
    args = build_parser().parse_args(["estimate", "--recipe", "deepseek-v3"])
    c = common.configuration(args)  # the options resolved as the command line resolves them
    lay, tr = c.layout, c.training
    assert [getattr(lay, k) for k in ("dp", "tp", "pp", "ep", "etp")] == [opts[k] for k in ("dp", "tp", "pp", "ep",
                                                                                         "etp")]
    assert (tr.zero, tr.attention, tr.schedule, tr.microbatches, tr.fp8) == (
        opts["zero"], opts["attention"], opts["schedule"], opts["microbatches"], opts["fp8_activations"])
    assert (tr.recompute, set(tr.recompute_ops)) == ("custom", set(opts["recompute"].split(":")[1].split(",")))
    assert {k: v for k, v in tr.bytes if k in ("B_w", "B_g", "B_m", "B_1", "B_2", "B_a")} == {
        "B_w": opts["weight_dtype"], "B_g": opts["grad_dtype"], "B_m": opts["master_dtype"],
        "B_1": opts["optimizer_dtype"], "B_2": opts["optimizer_dtype"], "B_a": opts["act_dtype"]}
    common.finish(args)
    again = common.configuration(args)  # after finish: the resolved options resolve to themselves
    assert (again.layout, again.training) == (lay, tr)
    cfg.validate_layout(c.model, lay, tr.seq)
    cfg.validate_training(tr)


def test_every_recipe_runs(capsys):
    for name in RECIPES:
        assert main(["estimate", "--recipe", name, "--json"]) == 0
        capsys.readouterr()
