"""Conventions (derivations/config/convention_presets/): other sources reproduced exactly, and every modelling
assumption a switch.

Each switch is pinned by the bytes it moves at the paper's layout (b=1, s=4096, TP=SP=2, EP=8),
derived from its formula (the tensors it adds, removes or rescales), not pasted from a run.
"""
import json
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction

import pytest
import sympy as sp

from derivations.activations import PRESET_CONVENTIONS, View, view_terms
from derivations import config as cfg
from memsym.cli import main
from derivations.notation import (B_a, CP, D, EP, ETP, E_token, F, N, N_r, N_s, SP, TP, b, d_c, d_cq, h, h_E,
                               n_h, s)
from symbolic.numeric import exact

V3 = cfg.PRESETS["deepseek-v3"]
LAY = cfg.Layout()


@pytest.fixture(scope="module")
def terms():
    from derivations import build
    return build(V3)


@pytest.fixture(scope="module")
def subs():
    return cfg.substitution(V3, LAY, cfg.Training(), cfg.stage(V3, LAY, 1))



def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def layer(subs, recompute="none", attention="eager", **switches):
    """Exact bytes of one MoE transformer layer under a view with these switches."""
    view = View(recompute, (), attention, False, cfg.Conventions(**switches))
    return exact(view_terms(view)["layer"], subs)


def delta(subs, expr):
    return exact(expr, subs)


# ------------------------------------------------------------------ the sources, reproduced
def test_megatron_most_loaded_shard(terms):
    # Megatron-LM theoretical_memory_usage.py, DeepSeek-v3 with its MTP layer, DP32 TP2 PP16 EP8
    tr = cfg.Training(zero=1).with_bytes(B_1=4, B_2=4)
    subs = cfg.substitution(V3, LAY, tr, cfg.whole_model(V3))
    subs[D] = 1
    assert exact(terms["conv.megatron.params"], subs) == 7579073152
    states = sum(exact(terms[f"conv.megatron.{c}"], subs)
                 for c in ("weights.replicated", "gradients.replicated", "optimizer.sharded"))
    assert states == 55649283312
    # beta(d) = 6 + 12/d: the distributed optimizer is ZeRO-1 with FP32 moments
    p = terms["conv.megatron.params"]
    n = sum(exact(q.expr, subs) for q in p.parts if "non_moe" in q.tags)
    e = exact(p.part("experts").expr, subs)
    assert states == n * (6 + Fraction(12, 32)) + e * (6 + Fraction(12, 8))
    assert [q.key for q in p.parts] == ["tp_split", "shared", "replicated", "experts"]


def test_modelzoo_layer_activations(terms, subs):
    assert exact(terms["conv.modelzoo.layer"], subs) == 1203765248
    assert exact(terms["conv.modelzoo.layer.full"], subs) == 29360128


def test_modelzoo_preset_view_is_the_literal_modelzoo_list(terms):
    """The preset's view of the tagged tensor lists equals ModelZoo's own list, symbolically, at SP = TP
    (ModelZoo divides by TP where the paper's tensors are sequence-parallel) and ETP = 1 (ModelZoo has none)."""
    zoo = View("none", (), "flash", False, PRESET_CONVENTIONS["modelzoo"])
    at = {SP: TP, F: 1, ETP: 1}
    for view, tid in ((zoo, "conv.modelzoo.layer"), (replace(zoo, recompute="full"), "conv.modelzoo.layer.full")):
        ours = view_terms(view)["layer"].base_expr.xreplace(at)
        assert sp.expand(ours - terms[tid].base_expr) == 0, tid


def test_estimate_cli_acceptance(capsys):
    assert run_json(capsys, "estimate")["bytes"]["activations_per_layer"] == 6167789568
    assert run_json(capsys, "estimate", "--recompute", "full")["bytes"]["activations_per_layer"] == 58785792
    z = run_json(capsys, "estimate", "--conventions", "modelzoo")
    assert z["bytes"]["activations_per_layer"] == 1203765248
    assert z["terms"]["activations_per_layer"] == "act.layer.modelzoo" and z["conventions"]["preset"] == "modelzoo"
    zf = run_json(capsys, "estimate", "--conventions", "modelzoo", "--recompute", "full")
    assert zf["bytes"]["activations_per_layer"] == 29360128
    m = run_json(capsys, "estimate", "--conventions", "megatron", "--mtp")
    assert m["params"]["total"] == 7579073152
    assert m["bytes"]["weights"] + m["bytes"]["gradients"] + m["bytes"]["optimizer"] == 55649283312
    assert m["terms"]["params"] == "conv.megatron.params" and m["training"]["zero"] == 1
    assert m["training"]["bytes_per_element"]["B_1"] == 4 == m["training"]["bytes_per_element"]["B_2"]


def test_megatron_without_mtp_counts_no_mtp_layer(capsys, terms):
    m = run_json(capsys, "estimate", "--conventions", "megatron")
    with_mtp = run_json(capsys, "estimate", "--conventions", "megatron", "--mtp")
    # one MTP layer: an MoE layer's share of every part (A + F_s split by TP, 2h + h N replicated, F_r / (ETP EP))
    subs = cfg.substitution(V3, LAY, cfg.Training(), cfg.whole_model(V3))
    p = terms["conv.megatron.params"]
    per_d = sum(sp.diff(q.expr, D) for q in p.parts)
    assert with_mtp["params"]["total"] - m["params"]["total"] == exact(per_d, subs)


# ------------------------------------------------------------------ every switch, pinned
def test_paper_defaults_keep_the_papers_ids_and_values(terms, subs):
    vt = view_terms(View(conv=cfg.Conventions()))
    assert vt["layer"].id == "act.layer" and vt["moe"].id == "act.moe.layer"
    assert exact(vt["layer"], subs) == 6167789568


def test_routed_tokens_dispatch(terms, subs):
    t = view_terms(View(conv=cfg.Conventions(routed_tokens="dispatch")))["moe"]
    assert t.id == "act.moe.layer.dispatch" and "routed-tokens dispatch" in t.provenance
    routed = terms["act.moe.layer"].part("routed").expr
    assert sp.expand(t.expr - terms["act.moe.layer"].expr - (EP / SP - 1) * routed) == 0
    # b s N_r / SP token-copies instead of b s N_r / EP: 3 times the paper's routed tensors at EP8 SP2
    paper_routed = (N / EP) * (3 * E_token * h + 8 * E_token * h_E)  # B_a = 2, B_k = 1
    assert layer(subs, routed_tokens="dispatch") - layer(subs) == 3 * delta(subs, paper_routed) == 465567744


def test_attention_flash(subs):
    assert layer(subs, attention="flash") - layer(subs) == delta(subs,
                                                                 -5 * b * n_h * s ** 2 / TP + 4 * b * n_h * s / TP)


def test_router_tensors_sp_halves_4bsN(subs):
    assert layer(subs, router_tensors="sp") - layer(subs) == -delta(subs, 4 * b * s * N) / 2


def test_shared_expert_tp_activations_and_weights(subs, capsys):
    assert layer(subs, shared_expert="tp") - layer(subs) == -delta(subs, 8 * b * s * h_E * N_s) / 2
    paper = run_json(capsys, "estimate")
    tp = run_json(capsys, "estimate", "--shared-expert", "tp")
    moe_layers = 4  # stage 1
    assert paper["params"]["moe"] - tp["params"]["moe"] == moe_layers * 3 * V3.h * V3.h_E * V3.N_s // 2
    assert tp["terms"]["weights"] == "zero.weights.replicated.shared-tp"
    assert tp["terms"]["params"] == "static.device.total.shared-tp"


def test_dropout_masks_none(subs):
    masks = b * n_h * s ** 2 / TP + b * s * h / SP + (N / EP) * E_token * h + N_s * b * s * h  # B_k = 1
    # dropout off, softmax in B_a: F.dropout(p=0) returns its input, so the attention dropout's B_a output
    # (2 b n_h s^2 / TP) is the softmax output itself and goes with the masks
    assert layer(subs, dropout_masks="none") - layer(subs) == -delta(subs, masks + 2 * b * n_h * s ** 2 / TP)
    # with an FP32 softmax the B_a probabilities are a cast (transformers, Megatron-Core local): still kept
    fp32 = layer(subs, dropout_masks="none", softmax_dtype="fp32") - layer(subs, dropout_masks="none")
    assert fp32 == delta(subs, 4 * b * n_h * s ** 2 / TP)


def test_checkpoints_one(subs):
    assert layer(subs, "full") == 58785792
    assert (layer(subs, "full", checkpoints="one") - layer(subs, "full")
            == -delta(subs, 2 * b * s * h / SP + 2 * b * s * N_r))
    assert layer(subs, checkpoints="one") == layer(subs)  # no effect without full recomputation
    assert view_terms(View(conv=cfg.Conventions(checkpoints="one")))["layer"].id == "act.layer"  # not named


def test_swiglu_fused(subs):
    drop = (N / EP) * B_a * E_token * h_E / ETP + N_s * B_a * b * s * h_E / CP  # the activation output (1 of 2)
    assert layer(subs, swiglu="fused") - layer(subs) == -delta(subs, drop)


def test_expert_outputs_kept(subs):
    assert layer(subs, expert_outputs="kept") - layer(subs) == delta(subs, (N / EP) * 2 * E_token * h)


def test_latent_norms_kept(subs):
    assert layer(subs, latent_norms="kept") - layer(subs) == delta(subs, 2 * b * s * (d_cq + d_c))


def test_routing_state_row_map(subs):
    assert layer(subs, routing_state="row-map") - layer(subs) == delta(subs, 8 * b * s * N - 2 * b * s * N_r)


def test_inventory_modelzoo(subs):
    mz = 2 * b * s * d_cq / TP + 2 * b * s * d_c / TP + 2 * b * s * N + 2 * b * s * h
    paper = 2 * b * s * (d_cq + d_c) + 2 * b * s * h / SP + 4 * b * s * N + 2 * b * s * h * N_s
    assert layer(subs, inventory="modelzoo") - layer(subs) == delta(subs, mz - paper)


def test_bytes_per_param(capsys):
    paper = run_json(capsys, "estimate")
    fp32 = run_json(capsys, "estimate", "--bytes-per-param", "fp32-moments")
    dist = run_json(capsys, "estimate", "--bytes-per-param", "distributed")
    P = paper["params"]
    assert fp32["bytes"]["optimizer"] == paper["bytes"]["optimizer"] * 12 // 8 == 12 * P["total"]
    assert dist["training"]["zero"] == 1
    assert dist["bytes"]["optimizer"] == 12 * (Fraction(P["non_moe"], 32) + Fraction(P["moe"], 8))
    assert dist["bytes"]["weights"] + dist["bytes"]["gradients"] == 6 * P["total"]
    typed = run_json(capsys, "estimate", "--bytes-per-param", "distributed", "--zero", "2")
    assert typed["training"]["zero"] == 2  # a typed option wins over the convention
    bf16 = run_json(capsys, "estimate", "--bytes-per-param", "fp32-moments", "--optimizer-dtype", "bf16")
    assert bf16["bytes"]["optimizer"] == paper["bytes"]["optimizer"]


def test_rank_megatron_shared_replicated(capsys, terms):
    tp = run_json(capsys, "estimate", "--rank", "megatron")
    rep = run_json(capsys, "estimate", "--rank", "megatron", "--shared-expert", "replicated")
    assert rep["terms"]["params"] == "conv.megatron.params.shared-replicated"
    assert tp["terms"]["params"] == "conv.megatron.params.shared-replicated"  # --rank alone keeps the paper's shared
    tp = run_json(capsys, "estimate", "--rank", "megatron", "--shared-expert", "tp")
    assert tp["terms"]["params"] == "conv.megatron.params"
    f_s = 3 * V3.h * V3.h_E * V3.N_s * Fraction(V3.l - V3.first_k_dense, 16)  # F_s L_m / PP, D = 0
    assert rep["params"]["non_moe"] - tp["params"]["non_moe"] == f_s / 2


def test_mtp_is_refused_under_the_modelzoo_rank():
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--mtp", "--rank", "modelzoo"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "ModelZoo rank counts none" in p.stderr
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(conventions=cfg.Conventions(mtp=True, rank="modelzoo")))
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(conventions=cfg.Conventions(routed_tokens="nope")))


def test_mtp_under_the_stage_rank_puts_the_modules_on_the_last_stage(capsys):
    """--mtp with the stage rank: DeepSeek-V3's one MTP module is one more MoE layer's parameters on the
    last stage, plus the embedding copy Megatron-Core keeps there when PP > 1 (v h / TP, untied); the
    other stages are unchanged.  Expected: a 4-MoE-layer stage's parameters / 4 (Table 4's stage 1) and
    v h / TP from the config (129,280 x 7,168 / 2)."""
    plain = run_json(capsys, "estimate", "--stage", "15")
    mtp = run_json(capsys, "estimate", "--stage", "15", "--mtp")
    one_moe = run_json(capsys, "estimate", "--stage", "1")["params"]["total"] // 4
    assert mtp["params"]["total"] - plain["params"]["total"] == one_moe + 129280 * 7168 // 2
    assert run_json(capsys, "estimate", "--stage", "3", "--mtp")["params"] == \
        run_json(capsys, "estimate", "--stage", "3")["params"]
    one = run_json(capsys, "estimate", "--pp", "1", "--dp", "512", "--mtp")["params"]["total"] - \
        run_json(capsys, "estimate", "--pp", "1", "--dp", "512")["params"]["total"]
    assert one == one_moe          # PP = 1: the embedding is already on the stage


# ------------------------------------------------------------------ CLI: presets, overrides, help
def test_every_switch_has_help_text():
    """--help-all lists every switch with its help; --help the common options, and says where the rest are."""
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--help-all"], capture_output=True, text=True)
    text = " ".join(p.stdout.split())
    for spec in cfg.CONVENTION_SWITCHES.values():
        assert spec.option in text and spec.help.split("(")[0].strip() in text, spec.option
    for opt in ("--conventions", "--bytes-per-param", "--mtp", "--attention", "--tensors"):
        assert opt in text
    short = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--help"], capture_output=True,
                           text=True).stdout
    assert "--help-all" in short and "--conventions" in short and "--tp" in short
    assert "  --routed-tokens {" not in short and "  --routed-tokens {" in p.stdout  # the switch's own entry
    assert len(short.splitlines()) < len(p.stdout.splitlines()) / 2


def test_typed_switch_overrides_the_preset_in_any_order(capsys):
    a = run_json(capsys, "estimate", "--conventions", "modelzoo", "--routed-tokens", "paper")
    b_ = run_json(capsys, "estimate", "--routed-tokens", "paper", "--conventions", "modelzoo")
    assert a["conventions"] == b_["conventions"]
    assert a["conventions"]["routed_tokens"] == "paper" and a["conventions"]["attention"] == "flash"
    assert a["conventions"]["preset"] is None
    assert a["bytes"]["activations_per_layer"] < 1203765248  # fewer routed token-copies than dispatch


def test_switched_terms_name_their_switch(terms):
    vt = view_terms(View("none", (), "flash", False, PRESET_CONVENTIONS["modelzoo"]))
    assert vt["layer"].id == "act.layer.modelzoo"
    assert "inventory modelzoo" in vt["moe"].meaning and "routed-tokens dispatch" in vt["moe"].provenance
    mixed = view_terms(View(conv=cfg.Conventions(routed_tokens="dispatch", router_tensors="sp")))
    assert mixed["moe"].id == "act.moe.layer.dispatch.router-sp"
    assert mixed["mla"].id == "act.mla.layer"  # switches that change nothing here leave the paper's term


# ------------------------------------------------------------------ per-tensor view
def test_tensors_add_up_and_savings_match_the_recompute_views(capsys):
    d = run_json(capsys, "estimate", "--tensors")
    assert sum(t["bytes"] for t in d["tensors"]) == d["total"] == 6167789568
    assert all(t["kept_for"] for t in d["tensors"])
    saving = {s["option"]: s["bytes"] for s in d["savings"]}
    for op in ("norm", "swiglu", "mla_up", "shared"):
        custom = run_json(capsys, "estimate", "--recompute", f"custom:{op}")["bytes"]["activations_per_layer"]
        assert d["total"] - custom == saving[f"custom:{op}"], op
    fc1 = sum(t["bytes"] for t in d["tensors"] if t["key"] == "routed.swiglu_in")
    assert saving["offload expert fc1"] == fc1 > 0
    z = run_json(capsys, "estimate", "--tensors", "--conventions", "modelzoo")
    assert z["total"] == 1203765248 and z["term"] == "act.layer.modelzoo"
    assert any(t["key"] == "routed.out" for t in z["tensors"])


def test_tensors_text_lists_operations(capsys):
    assert main(["estimate", "--tensors", "--conventions", "modelzoo"]) == 0
    out = capsys.readouterr().out
    assert "permutation row map" in out and "kept for" in out and "offload expert fc1" in out
    assert "1,203,765,248" in out and "--inventory modelzoo" in out


def test_report_shows_the_switched_formulas(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memsym", "report", "--conventions", "modelzoo", "--format", "md",
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "report.md").read_text()
    for needle in ("act.layer.modelzoo", "act.moe.layer.modelzoo", "conv.modelzoo.params",
                   "--routed-tokens dispatch", "permutation row map", "1,203,765,248"):
        assert needle in md, needle


def test_report_notebooks_carry_the_conventions():
    """The notebooks' configuration cell rebuilds the same Training, conventions included."""
    from memsym.report.notebook import setup_source
    from memsym.report import Context
    tr = cfg.Training(attention="flash", conventions=PRESET_CONVENTIONS["modelzoo"])
    src = setup_source(Context.create("deepseek-v3", LAY, tr, 1))
    line = next(ln for ln in src.splitlines() if ln.startswith("training = "))
    assert "cfg.Conventions(" in line
    ns = {"cfg": cfg}
    exec(line, ns)  # generated by memsym, not user input
    assert ns["training"] == tr


def test_runtime_buffers_are_the_cublas_workspaces(capsys):
    """--runtime-buffers te (in mcore-te): Transformer Engine's Hopper cuBLAS workspace, 32 MiB + 1 KiB
    (get_cublas_workspace_size_bytes), once for GEMMs and once per grouped-GEMM stream (4), and PyTorch's
    32 MiB cuBLAS workspace (:4096:8), on every device and in the total; the local spec and the paper: none."""
    want = 5 * (32 * 2 ** 20 + 1024) + 32 * 2 ** 20
    te = run_json(capsys, "estimate", "--conventions", "mcore-te")
    assert te["bytes"]["runtime"] == want == 201_331_712
    assert te["bytes"]["total"] == sum(te["bytes"][k] for k in ("weights", "gradients", "optimizer", "activations",
                                                                "runtime"))
    off = run_json(capsys, "estimate", "--conventions", "mcore-te", "--runtime-buffers", "none")
    assert "runtime" not in off["bytes"] and off["bytes"]["total"] == te["bytes"]["total"] - want
    assert "runtime" not in run_json(capsys, "estimate", "--conventions", "mcore")["bytes"]
    assert "runtime" not in run_json(capsys, "estimate")["bytes"]


def test_mtp_under_dualpipe_adds_no_second_embedding(capsys):
    """DualPipe's rank 0 holds stages 0 and PP - 1: the embedding is already there (shared with the MTP
    module, DeepSeek-V3 report Sec. 3.2.1), so --mtp adds one MoE layer's parameters only."""
    argv = ["estimate", "--schedule", "dualpipe", "--microbatches", "32", "--stage", "0"]
    one_moe = run_json(capsys, "estimate", "--stage", "1")["params"]["total"] // 4
    assert run_json(capsys, *argv, "--mtp")["params"]["total"] - run_json(capsys, *argv)["params"]["total"] == one_moe


def test_ce_backward_cast_is_one_logits_gradient_on_the_last_stage(capsys):
    """--ce-backward cast adds B_a b s v / (TP CP) on the last stage only: DeepSeek-V3, b 1, s 4096,
    v 129,280, TP 2: 2 x 4096 x 129,280 / 2 bytes."""
    at = lambda stage, v: run_json(capsys, "estimate", "--conventions", "mcore-te", "--stage", stage,
                                   "--ce-backward", v)["bytes"]["activations"]
    assert at("15", "cast") - at("15", "none") == 2 * 4096 * 129280 // 2 == 529_530_880
    assert at("1", "cast") == at("1", "none")
