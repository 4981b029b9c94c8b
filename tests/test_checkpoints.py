"""Real checkpoints (paper/published.toml): exact weight counts, MTP and activated parameters against the
published totals (paper/published.toml), through config.json files the project writes itself."""
import json
import re
import tomllib
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import pytest
import sympy as sp

from derivations import config as cfg
from derivations.config import hfconfig  # noqa: F401
from derivations.families.deepseek import checkpoint as ckpt
from memsym.cli import main
from derivations.notation import D, N, h
from symbolic.numeric import exact
from derivations.paper.reference import UNIT_SCALE, rounds_to

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
PUBLISHED = tomllib.loads((ROOT / "paper" / "published.toml").read_text())["entry"]
PRESETS = ["deepseek-v3", "deepseek-v2", "deepseek-v2-lite"]
VARIANTS = sorted(str(p) for p in (DATA / "variants").glob("*.json"))


def config_path(model: str) -> str:
    return str(DATA / model / "config.json")


def run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@lru_cache(maxsize=None)
def _params_json(model: str) -> str:
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["params", "--model", model, "--accounting", "checkpoint", "--mtp", "--json"]) == 0
    return buf.getvalue()


def params_json(model: str) -> dict:
    return json.loads(_params_json(model))


def lookup(data, path):
    if isinstance(path, list):
        return sum(lookup(data, p) for p in path)
    for key in path.split("."):
        data = data[key]
    return data


# ---------------------------------------------------------------- published totals
@pytest.mark.parametrize("entry", PUBLISHED, ids=[e["id"] for e in PUBLISHED])
def test_published_totals(entry):
    """Each published number, judged as paper/printed.toml entries are: it agrees at its published
    precision, or the entry records the known cause (and then it must still disagree)."""
    d = params_json(config_path(entry["model"]))
    derived = Fraction(lookup(d, entry["json"])) / UNIT_SCALE[entry["unit"]]
    agrees = rounds_to(derived, Fraction(str(entry["value"])), entry["decimals"])
    if entry.get("discrepancy"):
        assert not agrees, f"{entry['id']}: records a discrepancy but now agrees (stale): {float(derived)}"
    else:
        assert agrees, f"{entry['id']}: published {entry['printed']}, derived {float(derived)} {entry['unit']}"


def test_the_acceptance_totals_are_published_entries():
    """The published totals are entries of the data file, without a recorded discrepancy."""
    plain = {e["id"] for e in PUBLISHED if not e.get("discrepancy")}
    for eid in ("v3.total", "v3.activated", "v3.model_page", "v2.total", "v2.activated", "v2-lite.total"):
        assert eid in plain


@pytest.mark.parametrize("model", PRESETS)
def test_config_file_and_preset_give_the_same_counts(model):
    a, b = params_json(config_path(model)), params_json(model)
    for key in ("total", "stages", "activated", "mtp", "checkpoint_files", "per_layer"):
        assert a[key] == b[key], key


def test_v3_checkpoint_total_is_the_foundation_contract():
    assert params_json("deepseek-v3")["total"] == 671026419200


@pytest.mark.parametrize("entry", [e for e in PUBLISHED if e["json"] == "activated.without_embedding"],
                         ids=lambda e: e["id"])
def test_published_activated_lies_between_the_readings(entry):
    """Whatever convention a publisher used, the figure lies between the layers alone and everything."""
    a = params_json(config_path(entry["model"]))["activated"]
    value = Fraction(str(entry["value"])) * UNIT_SCALE[entry["unit"]]
    half = Fraction(1, 2) * Fraction(10) ** -entry["decimals"] * UNIT_SCALE[entry["unit"]]
    assert a["without_embedding_and_head"] - half <= value <= a["with_embedding_and_head"] + half
    assert a["without_embedding_and_head"] < a["without_embedding"] < a["with_embedding_and_head"]


# ---------------------------------------------------------------- the 685B and the README's MTP figures
def test_685b_is_main_plus_mtp_plus_its_copies_plus_fp8_scales():
    d = params_json(config_path("deepseek-v3"))
    f = d["checkpoint_files"]
    assert f["main"] == d["total"]
    assert f["mtp"] == d["mtp"]["params"]
    assert f["mtp_embedding_head_copies"] == d["mtp"]["modules"] * (d["per_layer"]["embedding"] +
                                                                     d["per_layer"]["head"])
    assert f["total"] == f["main"] + f["mtp"] + f["mtp_embedding_head_copies"] + f["fp8_scales"]
    assert sum(f["by_dtype"].values()) == f["total"]
    page = next(e for e in PUBLISHED if e["id"] == "v3.model_page")
    B = UNIT_SCALE["B"]
    # the scale tensors (not weights) decide the rounding: without them 684.49B would print as 684B
    assert rounds_to(Fraction(f["total"]) / B, Fraction(page["value"]), 0)
    assert not rounds_to(Fraction(f["total"] - f["fp8_scales"]) / B, Fraction(page["value"]), 0)
    # and the README's 671B + 14B: the MTP module with its copies is 13.46B
    assert round((f["mtp"] + f["mtp_embedding_head_copies"]) / 1e9) == 13


def test_readme_mtp_figures_leave_out_eh_proj():
    """The recorded cause of v3.readme.mtp and v3.readme.mtp_activated: without eh_proj both agree."""
    d = params_json(config_path("deepseek-v3"))
    entries = {e["id"]: e for e in PUBLISHED}
    B = UNIT_SCALE["B"]
    eh = d["mtp"]["per_module"]["eh_proj"]
    assert eh == 2 * 7168 * 7168
    mtp = entries["v3.readme.mtp"]
    assert rounds_to(Fraction(d["mtp"]["params"] - eh) / B, Fraction(str(mtp["value"])), mtp["decimals"])
    act = entries["v3.readme.mtp_activated"]
    assert rounds_to(Fraction(lookup(d, act["json"]) - eh) / B, Fraction(str(act["value"])), act["decimals"])


def test_mtp_adds_about_eleven_and_a_half_billion():
    d = params_json("deepseek-v3")
    assert 11.5e9 < d["mtp"]["params"] < 11.7e9
    assert d["total_with_mtp"] == d["total"] + d["mtp"]["params"]
    assert d["mtp"]["per_module"]["block"] == d["per_layer"]["moe_layer"]


def test_models_without_mtp():
    for model in ("deepseek-v2", "deepseek-v2-lite"):
        d = params_json(model)
        assert d["mtp"]["modules"] == 0 and d["mtp"]["params"] == 0 and d["total_with_mtp"] == d["total"]


# ---------------------------------------------------------------- terms = the checkpoint's tensor inventory
def _inventory(m):
    tensors = ckpt.checkpoint_tensors(m, mtp=True)
    main_ = sum(t.numel for t in tensors if t.part == "main")
    mtp = sum(t.numel for t in tensors if t.part == "mtp")
    # one token: N_r of the N routed experts; the embedding is looked up, not multiplied (when tied,
    # the one v x h matrix is multiplied as the head)
    act = sum(Fraction(t.numel) * (Fraction(m.N_r, m.N) if ".experts." in t.name else 1)
              for t in tensors if t.part == "main" and (t.kind != "embedding" or m.tie_word_embeddings))
    return main_, mtp, act


@pytest.mark.parametrize("model", PRESETS + VARIANTS)
def test_terms_count_what_the_checkpoint_inventory_holds(model):
    """Two independent counts: the symbolic terms (from the paper's matrices) and the list of the
    checkpoint's tensors by their Hugging Face names and fused shapes (q_b_proj, kv_a_proj_with_mqa,
    kv_b_proj, one shared-experts MLP of N_s h_E)."""
    from derivations import build
    m = cfg.load_model(model)
    t = build(m)
    whole = cfg.substitution(m, None, None, cfg.whole_model(m))
    main_, mtp, act = _inventory(m)
    assert exact(t["params.stage.checkpoint"], whole) == main_
    assert exact(t["params.mtp"], whole) == mtp
    a = t["params.activated.checkpoint"]
    emb = exact(t["params.activated"].part("embedding").expr, whole)
    assert exact(a, whole) - emb == act


def test_tied_embeddings_are_counted_once():
    m = cfg.load_model(str(DATA / "variants" / "tied_no_mtp_greedy.json"))
    names = [t.name for t in ckpt.checkpoint_tensors(m)]
    assert "lm_head.weight" not in names
    d = params_json(str(DATA / "variants" / "tied_no_mtp_greedy.json"))
    a = d["activated"]
    vh = m.v * m.h
    assert a["with_embedding_and_head"] - a["without_embedding_and_head"] == vh   # one v x h matrix
    assert a["without_embedding"] == a["with_embedding_and_head"]                # used as the head


def test_mtp_module_term_is_block_eh_proj_and_norms():
    from derivations import build
    t = build(cfg.PRESETS["deepseek-v3"])
    module = t["params.mtp.module"].expr
    assert sp.expand(module - t["params.layer.moe"].expr - N - 2 * h * h - 3 * h) == 0
    assert sp.expand(t["params.mtp"].expr - D * module) == 0
    v2 = build(cfg.PRESETS["deepseek-v2"])             # no noaux_tc routing bias
    assert sp.expand(v2["params.mtp.module"].expr - v2["params.layer.moe"].expr - 2 * h * h - 3 * h) == 0


def test_fp8_scales_are_per_128_block_of_the_fused_shapes():
    m = cfg.PRESETS["deepseek-v3"]
    byname = {t.name: t for t in ckpt.checkpoint_tensors(m, mtp=False)}
    kv_a = byname["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]
    assert kv_a.shape == (m.d_c + m.d_hr, m.h)
    assert ckpt.fp8_scale_numel(kv_a, (128, 128)) == 5 * 56         # 576 rows: ceil(576/128) = 5
    experts = byname["model.layers.3.mlp.experts.{e}.down_proj.weight"]
    assert experts.count == m.N and ckpt.fp8_scale_numel(experts, (128, 128)) == m.N * 56 * 16


# ---------------------------------------------------------------- every command accepts any such model
@pytest.mark.parametrize("variant", ["q_lora_null.json", "two_shared_experts.json", "moe_layer_freq_2.json",
                                     "v_head_dim_96.json", "kimi_k2_shape.json"])
def test_variants_run_through_params_estimate_and_terms(capsys, variant):
    path = str(DATA / "variants" / variant)
    d = json.loads(run(capsys, "params", "--model", path, "--accounting", "checkpoint", "--json"))
    assert d["total"] == sum(s["params"] for s in d["stages"])
    e = json.loads(run(capsys, "estimate", "--model", path, "--pp", "3", "--tp", "2", "--ep", "4", "--dp", "4",
                       "--json"))
    assert e["params"]["total"] == e["params"]["non_moe"] + e["params"]["moe"] > 0
    assert "params.mtp" in run(capsys, "terms", "--model", path)


@pytest.mark.parametrize("model, pp", [("deepseek-v2", 4), ("deepseek-v2-lite", 3), ("deepseek-v3", 16)])
def test_stage_devices_without_splitting_add_up_to_the_model(capsys, model, pp):
    """At TP = EP = ETP = 1 each device holds its whole stage: the Sec. 3 rules generalise."""
    paper_total = json.loads(run(capsys, "params", "--model", model, "--pp", str(pp), "--json"))["total"]
    got = 0
    for stage in range(pp):
        e = json.loads(run(capsys, "estimate", "--model", model, "--tp", "1", "--ep", "1", "--dp", "1", "--pp", str(pp),
                           "--stage", str(stage), "--json"))
        got += e["params"]["total"]
    assert got == paper_total


def test_estimate_v2_explains_the_split_and_the_device(capsys):
    argv = ["estimate", "--model", "deepseek-v2", "--tp", "1", "--pp", "4", "--ep", "8", "--dp", "16"]
    text = run(capsys, *argv)
    d = json.loads(run(capsys, *argv, "--json"))
    assert "60 layers (1 dense, 59 MoE) over PP=4 stages: 15,15,15,15" in text
    assert re.search(r"stage 0 +layers 0-14 +embedding, 1 dense, 14 MoE", text)
    assert re.search(r"stages 1-2 +layers 15-44 +15 MoE each +<- stage 1, this device", text)
    assert re.search(r"stage 3 +layers 45-59 +15 MoE, head", text)
    # the explanation's numbers multiply out to the device's P_n and P_m
    m = re.search(r"P_m = (\d+) MoE layers x ([\d,]+)", text)
    assert int(m.group(1)) * int(m.group(2).replace(",", "")) == d["params"]["moe"]
    n = re.search(r"P_n = (\d+) layers x \(MLA ([\d,]+) \+ LN ([\d,]+)\)$", text, re.M)
    num = lambda g: int(n.group(g).replace(",", ""))
    assert num(1) * (num(2) + num(3)) == d["params"]["non_moe"]
    assert "N/EP = 160/8 = 20 routed experts" in text and "N_s = 2 shared experts" in text


def test_params_text_shows_activated_mtp_and_files(capsys):
    text = run(capsys, "params", "--model", "deepseek-v3", "--accounting", "checkpoint", "--mtp")
    assert "activated parameters per token" in text and "without the embedding" in text
    assert "MTP modules (D=1" in text and "eh_proj, h x 2h" in text
    assert "FP8 scale tensors" in text and "684,531,386,000" in text
    assert "checkpoint-only tensors" in text
    assert "MTP modules: deepseek-v2 has none" in run(capsys, "params", "--model", "deepseek-v2", "--mtp")
