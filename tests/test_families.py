"""Model families as modules (derivations/families): the registry, the DeepSeek family's declaration
as the config reader uses it, a family found by being a package, and switches declared once
(derivations/config/switches.py: a SwitchSpec's ``exists`` tags, its compare label, the Conventions
fields made from the switches)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from derivations import families
from derivations.activations.view import EXISTS, View
from derivations.config import hfconfig
from derivations.config.model import ModelSpec
from derivations.config.switches import CONVENTION_SWITCHES, Conventions


def test_the_deepseek_family_is_what_the_config_reader_reads():
    fam = families.get("deepseek")
    assert fam.model_types[:5] == ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
    # DSA's indexers: a stage counts its layers holding one (L_I; GLM-5's shared layers hold none)
    assert [c[:2] for c in fam.counts] == [("L_I", "indexer")] and fam.additions[0][2:4] == ("L_I", "params.indexer")
    assert families.model_types() == fam.model_types + ("deepseek_v4",)  # DeepSeek-V4's family after DeepSeek's
    assert fam.module("config").ModelSpec is ModelSpec and ModelSpec.family == "deepseek"
    assert families.for_model_type("kimi_k2") is fam and families.for_model_type("llama") is None
    spec_fields = {f.name for f in dataclasses.fields(ModelSpec)}
    assert {attr for _, attr, _ in fam.dimensions} <= spec_fields
    assert fam.attention == "mla" and fam.flags == ("q_lora", "routing_bias", "tied", "indexer")
    # the indexer (DSA) was added later: a structure without it keeps its earlier name; it needs the query's LoRA
    assert fam.structure_key((True, True, False, False)) == "q1b1t0"
    assert fam.structure_key((True, True, False, True)) == "q1b1t0i1"
    assert len(fam.structures()) == 12 and all(s[0] for s in fam.structures() if s[3])
    # a config.json missing one of the family's fields is refused naming that field
    for field, _, meaning in fam.dimensions:
        data = {"model_type": "deepseek_v3", **{f: 8 for f, _, _ in fam.dimensions}}
        del data[field]
        with pytest.raises(Exception, match=f"required field '{field}'"):
            hfconfig.from_dict(data)


def test_the_parameters_module_is_the_familys(tmp_path):
    """The registry builds terms from the family's own module (imported by name, on first use)."""
    params = families.get("deepseek").module("parameters")
    assert params.__name__ == "derivations.families.deepseek.parameters"
    from symbolic.term import Terms
    ids = [t.id for t in params.terms(Terms(), families.get("deepseek"),
                                      {"q_lora": False, "routing_bias": False, "tied": True})]
    assert ids[0] == "params.mla" and "params.head" in ids


def test_a_family_is_its_declaration_and_hooks(tmp_path, monkeypatch):
    """A family written in a temporary package registers and builds its parameter terms through its hook, here a
    method of its own declaration (its folder has no parameters module), and refuses to take a model_type another
    family reads."""
    pkg = tmp_path / "gqafamily"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        import sympy as sp
        from derivations.families import Family
        from symbolic.term import Part, Term
        h, n_kv, d_h, n_h = sp.symbols("h n_kv d_h n_h", positive=True, integer=True)

        class GQA(Family):
            name, title, short, model_types = "gqa", "GQA + SwiGLU", "GQA + SwiGLU", ("toy_gqa",)
            kinds, flags = ("gqa", "dense", "head"), ("tied",)

            def parameter_terms(self, registry, flags):
                yield Term("params." + self.attention, "grouped-query attention of one layer", "params", "toy",
                           (Part("W_Q", "W^Q", (h, n_h, d_h)), Part("W_KV", "W^K and W^V", (2, h, n_kv, d_h)),
                            Part("W_O", "W^O", (n_h, d_h, h))))

        FAMILY = GQA()
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(families, "_REGISTRY", {f.name: f for f in families.all()})
    monkeypatch.delitem(sys.modules, "gqafamily", raising=False)
    import gqafamily
    fam = families.register(gqafamily.FAMILY)
    assert families.for_model_type("toy_gqa") is fam and families.get("deepseek").model_types[0] == "deepseek_v2"
    assert (fam.package, fam.parameters, fam.config) == ("gqafamily", "", "")  # no such modules in its folder
    assert not families.packaged("gqa") and fam.layout_defaults() == {"ep": 1, "etp": 1}
    (term,) = fam.parameter_terms(None, {"tied": False})
    assert term.id == "params.gqa"
    m = gqafamily
    assert term.expr.subs({m.h: 128, m.n_h: 8, m.n_kv: 2, m.d_h: 16}) == 128 * 8 * 16 + 2 * 128 * 2 * 16 + 8 * 16 * 128
    clash = type("Clash", (gqafamily.GQA,), {"name": "clash", "model_types": ("kimi_k2",)})()
    with pytest.raises(ValueError, match="model_type 'kimi_k2' is read by family 'deepseek'"):
        families.register(clash)
    with pytest.raises(TypeError, match="Family subclass with a name"):
        families.register(type("Nameless", (gqafamily.GQA,), {"name": ""})())


#: The toy family's folder (GQA + SwiGLU, written outside memsym) and a config.json of its model_type
TOY_DIR = Path(__file__).resolve().parent / "data" / "toyfamily"
TOY_FILE = json.loads((Path(__file__).resolve().parent / "data" / "toy" / "config.json").read_text())


def _toy_package(tmp_path) -> Path:
    """A copy of the toy's folder alone in ``tmp_path`` (its parent to put on sys.path)."""
    shutil.copytree(TOY_DIR, tmp_path / "toyfamily", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy family (tests/data/toyfamily) copied alone to a temporary folder and registered (the registry
    restored after)."""
    monkeypatch.syspath_prepend(str(_toy_package(tmp_path)))
    monkeypatch.setattr(families, "_REGISTRY", {f.name: f for f in families.all()})
    for mod in [m for m in sys.modules if m == "toyfamily" or m.startswith("toyfamily.")]:
        monkeypatch.delitem(sys.modules, mod)
    import toyfamily
    import derivations.notation  # noqa: F401 (the paper's symbols registered before the registries are saved)
    from derivations import evaluate
    from symbolic import notation
    saved = [(d, dict(d)) for d in (notation.REGISTRY, notation.SYMBOLS, notation.DEFINITIONS, evaluate._INSTALLED)]
    yield families.register(toyfamily.FAMILY)
    for d, before in saved:  # the toy's symbols and evaluators leave the process's registries as they were
        d.clear()
        d.update(before)
    evaluate._json.cache_clear()


def test_a_toy_family_reads_its_configs_and_layout_rules(toy, tmp_path):
    """A config.json of the toy's model_type becomes the toy family's spec through memsym's one reader
    (bounded, every field checked, errors naming the field); the layout is checked by the toy's own
    divisibility rules; no file outside the toy's package was edited."""
    from derivations.config import Layout, validate_layout
    from derivations.config.presets import checked, load_model
    from symbolic.errors import ConfigError
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    spec = load_model(str(path))
    assert type(spec).__module__ == "toyfamily.config" and spec.family == "toy"
    assert (spec.h, spec.h_F, spec.l, spec.n_h, spec.n_kv, spec.d_h, spec.v) == (256, 688, 4, 8, 2, 32, 1000)
    assert spec.name == "toy_gqa (h 256, 4 layers)" and checked(spec) == spec
    with pytest.raises(ConfigError, match="required field 'num_key_value_heads'"):
        hfconfig.from_dict({k: v for k, v in TOY_FILE.items() if k != "num_key_value_heads"}, "t.json")
    with pytest.raises(ConfigError, match="must be a positive integer, got -2"):
        hfconfig.from_dict(dict(TOY_FILE, num_key_value_heads=-2), "t.json")
    with pytest.raises(ConfigError, match=r"is not an architecture memsym covers \(MLA \+ MoE: deepseek_v2, "
                                          r"deepseek_v3, kimi_k2, deepseek_v32, .*kimi_k25 \(text_config\); "
                                          r"CSA/HCA \+ mHC \+ MoE: deepseek_v4; GQA \+ SwiGLU: toy_gqa\)"):
        hfconfig.from_dict(dict(TOY_FILE, model_type="llama"), "t.json")
    validate_layout(spec, Layout(dp=4, tp=2, pp=2, ep=1, etp=1))  # 2 | 8 heads, 2 kv heads, 688
    with pytest.raises(ConfigError, match=r"TP=4 must divide n_kv=2 \(toy_gqa") as e:
        validate_layout(spec, Layout(dp=2, tp=4, pp=1, ep=1, etp=1))
    assert e.value.constraint == "tp-divides-kv-heads"
    with pytest.raises(ConfigError, match="PP=8 is larger than the 4 layers"):
        validate_layout(spec, Layout(dp=1, tp=1, pp=8, ep=1, etp=1))
    with pytest.raises(ConfigError, match="ETP=2: toy_gqa .* has no experts to split; ETP must be 1"):
        validate_layout(spec, Layout(dp=2, tp=1, pp=1, ep=1, etp=2))
    # no expert rule names EP: the toy's search lattice has EP = ETP = 1 only
    from derivations.analyses.enumeration import _axis_divisors
    assert _axis_divisors(spec, "ep") == [1] and _axis_divisors(spec, "etp") == [1]
    deepseek = load_model("deepseek-v3")
    assert _axis_divisors(deepseek, "ep")[-1] == 256 and _axis_divisors(deepseek, "etp")[-1] == 2048


def _at(term, values):
    """A term's exact value, its symbols substituted by name (the toy's own symbols and the shared notation's)."""
    return term.expr.subs({x: values[x.name] for x in term.expr.free_symbols})


def _toy_tensors(t):
    """The toy's tensors as a Hugging Face Llama-style checkpoint lists them (independent of the terms): one
    layer's (attention, MLP, norms) and the embedding and head."""
    h, f, n_h, n_kv, d, v = (t[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                             "num_key_value_heads", "head_dim", "vocab_size"))
    layer = {"q_proj": n_h * d * h, "k_proj": n_kv * d * h, "v_proj": n_kv * d * h, "o_proj": h * n_h * d,
             "gate_proj": f * h, "up_proj": f * h, "down_proj": h * f,
             "input_layernorm": h, "post_attention_layernorm": h}
    return layer, {"embed_tokens": v * h, "lm_head": v * h}


def test_a_toy_family_from_its_folder_alone(tmp_path):
    """derivations/families/README.md's contract: the toy's folder copied alone (tests/data/toyfamily), made known
    with one line in a fresh process, and memsym's command line reads its config.json: params and estimate equal
    counts of its tensors made here.  No file of memsym names the toy: nothing outside its folder was edited."""
    import os
    import subprocess
    root = Path(__file__).resolve().parents[1]  # this checkout (derivations/ beside tests/)
    for package in ("derivations", "memsym", "symbolic"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "toy_gqa" not in text and "toyfamily" not in text, path
    code = textwrap.dedent('''
        import importlib, sys
        from derivations import families, generate
        from memsym.cli import main
        generate.install(families.register(importlib.import_module("toyfamily").FAMILY))  # the one line
        sys.exit(main(sys.argv[1:]))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_toy_package(tmp_path)), str(root)]))
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))

    def run(*argv):
        out = subprocess.run([sys.executable, "-c", code, *argv, "--model", str(path)], capture_output=True,
                             text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    layer, ends = _toy_tensors(TOY_FILE)
    p = run("params", "--pp", "2", "--json")
    assert p["total"] == 4 * sum(layer.values()) + sum(ends.values())
    assert [st["params"] for st in p["stages"]] == [2 * sum(layer.values()) + ends["embed_tokens"],
                                                    2 * sum(layer.values()) + ends["lm_head"]]
    e = run("estimate", "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "64", "--mbs", "1", "--zero", "1", "--json")
    norms = layer["input_layernorm"] + layer["post_attention_layernorm"]
    per_device = 2 * ((sum(layer.values()) - norms) // 2 + norms) + ends["embed_tokens"] // 2  # stage 0, TP = 2
    assert e["model"] == "toy_gqa (h 256, 4 layers)" and e["stage"]["moe_layers"] == 0
    assert e["params"] == {"non_moe": per_device, "moe": 0, "total": per_device}
    assert (e["bytes"]["weights"], e["bytes"]["gradients"]) == (2 * per_device, 4 * per_device)


def test_a_toy_familys_parameters_static_and_zero_terms(toy, tmp_path):
    """The shared sections build a toy family's registry from its own parameters module (no experts: no
    MoE layer, no P_m), and its counts equal those of its tensors listed independently."""
    from derivations.terms import build
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    from derivations.config.presets import load_model
    spec = load_model(str(path))
    reg = build(spec)
    assert "params.layer.moe" not in reg and "static.device.moe" not in reg and "params.mtp" not in reg
    assert not any(t.startswith(("conv.", "act.mla", "act.moe", "act.mtp")) for t in reg)
    layer, ends = _toy_tensors(TOY_FILE)
    dims = dict(spec.named())
    whole = dict(dims, L_d=spec.l, e_E=1, e_H=1)
    assert _at(reg["params.layer.dense"], dims) == sum(layer.values())
    assert _at(reg["params.stage"], whole) == spec.l * sum(layer.values()) + sum(ends.values())
    assert _at(reg["params.activated"], whole) == _at(reg["params.stage"], whole)
    # one device of a 2-stage layout with TP = 2: the projections split, the norms replicated
    first = dict(dims, L_d=2, e_E=1, e_H=0, TP=2)
    norms = layer["input_layernorm"] + layer["post_attention_layernorm"]
    per_layer = (sum(layer.values()) - norms) // 2 + norms
    assert _at(reg["static.device.total"], first) == 2 * per_layer + ends["embed_tokens"] // 2
    # ZeRO: the paper's optimizer states (FP32 master 4 B + BF16 momentum 2 B + BF16 variance 2 B per
    # parameter, Table 7), without and with sharding over DP = 2 and CP = 2; no expert row
    states = _at(reg["static.device.total"], first)
    rep, sh = reg["zero.optimizer.replicated"], reg["zero.optimizer.sharded"]
    assert [p.key for p in sh.parts] == ["non_moe"]
    adam = dict(first, B_m=4, B_1=2, B_2=2)
    assert _at(rep, adam) == 8 * states
    assert _at(sh, dict(adam, DP=2, CP=2)) == 2 * states  # non-expert states shard over DP CP


def test_a_toy_familys_activation_terms(toy, tmp_path):
    """The shared activation section builds the toy's terms per view from its own tensor lists: the paper's
    (everything kept), full recomputation (the layer input) and selective (no s^2 scores), composed per layer
    and stage with its own kinds (GQA + dense FFN, no MoE)."""
    from derivations.config.presets import load_model
    from derivations.terms import build
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    spec = load_model(str(path))
    reg = build(spec)
    v = dict(spec.named(), b=2, s=64, TP=2, SP=2, CP=1, B_a=2, B_k=1, L_d=3, e_H=1)
    b, s_, h, n_h, n_kv, d = 2, 64, spec.h, spec.n_h, spec.n_kv, spec.d_h
    tp = 2
    hidden = b * s_ * h // tp                                   # one B_a = 1 tensor of b s h on an SP shard
    heads = b * s_ * d // tp                                    # per head, TP-split
    gqa = 2 * hidden + 2 * hidden + 2 * heads * n_h + 2 * 2 * heads * n_kv \
        + (2 + 1 + 2) * b * n_h * s_ * s_ // tp + 2 * heads * n_h + hidden
    assert _at(reg["act.gqa.layer"], v) == gqa
    assert _at(reg["act.gqa.layer.full"], v) == 2 * hidden
    assert _at(reg["act.gqa.layer.selective"], v) == gqa - 5 * b * n_h * s_ * s_ // tp
    dense = _at(reg["act.dense.layer"], v)
    assert _at(reg["act.layer"], v) == gqa + dense
    assert _at(reg["act.stage"], v) == 3 * (gqa + dense) + _at(reg["act.head"], v)
    assert [p.key for p in reg["act.stage"].parts] == ["gqa", "dense", "head"]


def test_a_toy_familys_estimate_from_its_generated_evaluators(toy, tmp_path):
    """The toy's evaluators generated in memory from its terms (derivations.generate.install: the tables and
    module python -m derivations.generate commits for DeepSeek) give its per-device estimate: the paper's
    model states of the stage's parameters (2 + 4 + 2 + 2 + 2 bytes, ZeRO-1 over DP) and one micro-batch of
    its layers' activations, each equal to a count of its tensors made here."""
    from derivations import generate
    from derivations.assembly.device import estimate
    from derivations.config import Layout, Training
    from derivations.config.presets import load_model
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    spec = load_model(str(path))
    generate.install(toy)
    est = estimate(spec, Layout(dp=2, tp=2, pp=2, ep=1, etp=1), Training(mbs=1, seq=64, zero=1), stage_index=0)
    layer, ends = _toy_tensors(TOY_FILE)
    norms = layer["input_layernorm"] + layer["post_attention_layernorm"]
    per_device = 2 * ((sum(layer.values()) - norms) // 2 + norms) + ends["embed_tokens"] // 2
    assert est.params == {"non_moe": per_device, "moe": 0, "total": per_device}
    assert est.bytes["weights"] == 2 * per_device and est.bytes["gradients"] == 4 * per_device
    assert est.bytes["optimizer"] == (4 + 2 + 2) * per_device / 2           # ZeRO-1: sharded over DP = 2
    b, s_, h, n_h, n_kv, d, f = 1, 64, spec.h, spec.n_h, spec.n_kv, spec.d_h, spec.h_F
    hidden, heads = b * s_ * h // 2, b * s_ * d // 2        # SP = TP = 2 (the paper's default): b s h / SP
    gqa = 2 * hidden + 2 * hidden + 2 * heads * n_h + 2 * 2 * heads * n_kv \
        + (2 + 1 + 2) * b * n_h * s_ * s_ // 2 + 2 * heads * n_h + hidden
    dense = 2 * hidden + 2 * hidden + 2 * 2 * b * s_ * f // 2 + 2 * 2 * b * s_ * f // 2 + hidden
    assert est.bytes["activations"] == 2 * (gqa + dense)
    assert est.bytes["total"] == sum(est.bytes[k] for k in ("weights", "gradients", "optimizer", "activations"))
    assert [kind for _, kind, _ in est.by_layer] == ["dense", "dense"]
    assert est.term_ids["activations_gqa_layer"] == "act.gqa.layer" and "activations_moe_layer" not in est.term_ids


def test_a_toy_family_through_the_python_api(toy, tmp_path):
    """memsym.params and memsym.estimate (the commands' own data, options resolved as the command line resolves
    them) for the toy's config.json and for its spec object; --mtp refused for a family without MTP."""
    import memsym
    from derivations import generate
    from symbolic.errors import ConfigError
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    generate.install(toy)
    layer, ends = _toy_tensors(TOY_FILE)
    p = memsym.params(str(path), pp=2)
    assert p.total == 4 * sum(layer.values()) + sum(ends.values())
    assert p.per_layer.to_dict() == {"dense_layer": sum(layer.values()), "gqa": sum(layer.values()) - 3 * 688 * 256
                                     - 2 * 256, "norm": 2 * 256, "embedding": 256000, "head": 256000}
    assert [st["params"] for st in p.stages] == [2 * sum(layer.values()) + ends["embed_tokens"],
                                                 2 * sum(layer.values()) + ends["lm_head"]]
    assert p.activated.with_embedding_and_head == p.total and "per_moe_layer" not in p.activated.to_dict()
    spec = memsym.load_model(str(path))
    e = memsym.estimate(spec, dp=2, tp=2, pp=2, mbs=1, seq=64, stage=1)
    assert e.model == "toy_gqa (h 256, 4 layers)" and e.stage.head and e.stage.moe_layers == 0
    assert e.bytes.total == e.bytes.weights + e.bytes.gradients + e.bytes.optimizer + e.bytes.activations
    with pytest.raises(ConfigError, match="no multi-token-prediction modules"):
        memsym.params(spec, mtp=True)


def test_a_toy_family_on_the_command_line(toy, tmp_path, capsys):
    """memsym's command line (in this process, where the toy is registered): params and estimate of the toy's
    config.json, its layout defaults (EP = ETP = 1: no experts) under typed options, EP > 1 refused on one line."""
    from derivations import generate
    from memsym.cli import main
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    generate.install(toy)
    assert main(["params", "--model", str(path), "--pp", "2"]) == 0
    out = capsys.readouterr().out
    assert "layers: 4 dense, 0 MoE" in out and "every layer dense: every parameter" in out
    assert main(["estimate", "--model", str(path), "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "64", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert (est["layout"]["ep"], est["layout"]["etp"], est["stage"]["moe_layers"]) == (1, 1, 0)
    assert est["terms"]["activations_gqa_layer"] == "act.gqa.layer" and est["params"]["moe"] == 0
    assert main(["estimate", "--model", str(path), "--dp", "2", "--tp", "2", "--pp", "2", "--ep", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["memsym estimate: error: EP=2: toy_gqa (h 256, 4 layers) (GQA + SwiGLU) has no experts to split; "
                   "EP must be 1"]


def test_a_toy_familys_report(toy, tmp_path, capsys, same_in_a_kernel):
    """memsym report of the toy (Markdown, LaTeX, HTML): the sections its family declares (toyfamily/report.py),
    its own symbol and terms rendered, its per-device total the estimate's; twice byte-identical."""
    from derivations import generate
    from memsym.cli import main
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    generate.install(toy)
    argv = ["report", "--model", str(path), "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "64", "--mbs", "1",
            "--format", "tex,md,html"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 0
    assert main(argv + ["--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert all((tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes() for n in names)
    md = (tmp_path / "a" / "report.md").read_text()
    titles = [line for line in md.splitlines() if line.startswith("## ")]
    assert titles == ["## 1. Configuration", "## 2. Notation", "## 3. Parameters", "## 4. Per device", "## 5. ZeRO",
                      "## 6. Activations", "## 7. Buffers and fragmentation"]
    assert "$n_{kv}$" in md and "#### `params.gqa`" in md and "#### `act.gqa.layer`" in md
    assert "MLA" not in md.split("## 3.")[1] and "act.moe" not in md
    assert main(["estimate", "--model", str(path), "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "64", "--mbs", "1",
                 "--stage", "1", "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["bytes"]["total"]
    assert f"| total |  | {total:,} |" in md
    assert "\\section" in (tmp_path / "a" / "report.tex").read_text()
    # a notebook runs in a kernel of its own: the setup cell makes the toy known there as in this process
    assert main(["report", "--model", str(path), "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "64", "--mbs", "1",
                 "--format", "ipynb", "--out", str(tmp_path / "nb")]) == 0
    capsys.readouterr()
    setting = json.loads((tmp_path / "nb" / "report-01-setting.ipynb").read_text())
    setup = "".join(setting["cells"][1]["source"])
    assert "importlib.import_module('toyfamily').FAMILY" in setup
    assert "ToySpec(name='toy_gqa (h 256, 4 layers)'" in setup
    outputs = [o for c in setting["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert outputs and not any(o.get("output_type") == "error" for o in outputs)
    same_in_a_kernel([tmp_path / "nb" / "report-01-setting.ipynb"])


@pytest.mark.parametrize("argv, says", [
    (["search", "--gpus", "16", "--hbm", "80GiB"], "memsym search (checked for the DeepSeek family only)"),
    (["compare"], "memsym compare (other tools' conventions) is not available"),
    (["estimate", "--tensors"], "--tensors is not available"),
    (["estimate", "--conventions", "megatron"], "--rank megatron / --shared-expert tp is not available"),
    (["estimate", "--shared-expert", "tp"], "--rank stage / --shared-expert tp is not available"),
    (["estimate", "--conventions", "transformers"], "reads the symbol d_hr, which the model does not define"),
    (["estimate", "--mtp"], "--mtp: toy_gqa (h 256, 4 layers) (GQA + SwiGLU) has no multi-token-prediction modules"),
    (["estimate", "--mtp-activations", "last-stage"], "--mtp-activations last-stage: toy_gqa"),
    (["estimate", "--recipe", "deepseek-v3"], "--recipe deepseek-v3 is a recipe for a DeepSeek-V2/V3"),
])
def test_what_the_toy_family_has_no_terms_for_is_refused_on_one_line(toy, tmp_path, capsys, argv, says):
    """The DeepSeek-only commands and conventions, asked of the toy: exit 2 and one line, no traceback."""
    from derivations import generate
    from memsym.cli import main
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    generate.install(toy)
    layout = [] if argv[0] == "search" else ["--dp", "2", "--tp", "2", "--pp", "2"]
    assert main(argv + ["--model", str(path)] + layout) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"memsym {argv[0]}: error: ") and says in err[0], err


def test_registering_a_family_first_keeps_the_packages_families(tmp_path):
    """families.register before anything read the registry: DeepSeek's family is still found, and a family
    claiming its model_type is refused (a fresh process: this one's registry is loaded already)."""
    import subprocess
    _toy_package(tmp_path)
    code = textwrap.dedent('''
        from derivations import families
        import toyfamily
        families.register(toyfamily.FAMILY)
        assert families.for_model_type("deepseek_v3").name == "deepseek"
        try:
            families.register(type("Clash", (toyfamily.Toy,), {"name": "clash", "model_types": ("deepseek_v3",)})())
        except ValueError as e:
            print(e)
    ''')
    import os
    root = str(Path(__file__).resolve().parents[1])  # this checkout (derivations/ beside tests/)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), root]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "model_type 'deepseek_v3' is read by family 'deepseek'" in out.stdout


def test_the_shape_path_names_and_builds_deepseeks_terms_as_the_generated_tables_do():
    """The path a family without generated tables takes (what a view keeps built from the family's tensor
    lists with sympy: derivations/activations/shape.py) gives DeepSeek's terms exactly as the generated
    decision tables do, for the registered views, every conventions preset and custom recomputation."""
    from derivations.activations.kinds import REGISTERED, view_terms
    from derivations.activations.shape import Shape
    from derivations.activations.view import PRESET_CONVENTIONS
    views = list(REGISTERED) + [View("none", conv=c) for c in PRESET_CONVENTIONS.values()] + \
        [View("full", conv=c) for c in PRESET_CONVENTIONS.values()] + \
        [View("custom", ("mla_up", "swiglu"), "flash"), View("selective", attention="flash", fp8=True)]
    for q_lora in (True, False):
        shape = Shape("deepseek", (("q_lora", q_lora), ("routing_bias", True), ("tied", False)))
        for view in views:
            generated, generic = view_terms(view, q_lora), view_terms(view, shape)
            assert generated.keys() == generic.keys()
            for kind in generated:
                a, g = generated[kind], generic[kind]
                assert ((a.id, a.meaning, a.provenance, a.parts)
                        == (g.id, g.meaning, g.provenance, g.parts)), (view, kind)


def test_a_switch_is_declared_once():
    """Each switch's ``exists`` tags name its own values; the Conventions fields are the switches, with
    each switch's paper choice as the default; EXISTS holds a rule for every switch tag."""
    fields = {f.name: f.default for f in dataclasses.fields(Conventions)}
    assert fields == {**{n: s.default for n, s in CONVENTION_SWITCHES.items()}, "mtp": False}
    for name, spec in CONVENTION_SWITCHES.items():
        assert spec.label, name
        for tag, values in spec.exists.items():
            assert values and set(values) <= set(spec.values), (name, tag)
            # the rule reads this switch: a tensor with the tag exists iff the value is listed
            for value in spec.values:
                view = View(conv=dataclasses.replace(Conventions(), **{name: value}))
                assert EXISTS[tag](view) == (value in values), (name, tag, value)


# ----------------------------------------------------------------------------- the calculator page of a toy model
TOY_PAGE = [
    [("dp", 4), ("tp", 2), ("pp", 2)],
    [("dp", 2), ("tp", 2), ("pp", 2), ("zero", 3), ("recompute", "full"), ("mbs", 2), ("seq", 2048)],
    [("dp", 8), ("pp", 4), ("schedule", "1f1b"), ("microbatches", 8), ("attention", "flash"),
     ("recompute", "selective"), ("seq", 1024)],
    [("dp", 2), ("tp", 2), ("pp", 2), ("cp", 2), ("conventions", "mcore"), ("zero", 1), ("stage", 0)],
    [("dp", 4), ("pp", 2), ("dropout_masks", "none"), ("swiglu", "fused"), ("norm_storage", "te"),
     ("head_state", "mcore"), ("ce_backward", "cast"), ("runtime_buffers", "te"), ("checkpoints", "one"),
     ("schedule", "interleaved"), ("vpp", 2), ("microbatches", 4),
     ("recompute", "custom"), ("op-norm", True), ("op-mla_up", True), ("fp8_activations", True), ("imbalance", "1.5")],
]
TOY_REFUSED = [
    [("tp", 3), ("pp", 2)],                       # the toy's own rule: TP | n_h (its Divides, in its words)
    [("tp", 8), ("pp", 2), ("dp", 1)],            # TP | n_kv
    [("ep", 2), ("pp", 2)],                       # no experts to split
    [("pp", 2), ("conventions", "megatron")],     # Megatron's rank: other tools' conventions, DeepSeek's only
    [("pp", 2), ("mtp_activations", "last-stage")],  # no MTP modules
    [("pp", 8)],                                  # more stages than its 4 layers
    # transformers' rotary cache reads DeepSeek's d_h^R, a dimension the toy does not have
    [("dp", 2), ("tp", 2), ("pp", 2), ("conventions", "transformers")],
    [("pp", 2), ("recipe", "deepseek-v3")],       # a recipe for a DeepSeek model: the page's model is typed
]


@pytest.fixture
def toy_page(toy, tmp_path):
    """The calculator page of the toy's config.json (`memsym page --model FILE`: memsym.page.render with the
    model read by the command line's reader), and the file."""
    from derivations import generate
    from memsym.cli import main
    from memsym.page import PAGE_NAME
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY_FILE))
    generate.install(toy)
    assert main(["page", "--model", str(path), "--out", str(tmp_path / "page")]) == 0
    return tmp_path / "page" / PAGE_NAME, path


def _page_estimate(browser, page, controls):
    """The page's state and refusal after setting ``controls`` on a fresh load (the paper's default layout, PP 16,
    is refused for a 4-layer model: no control is set when the page loads)."""
    from test_page import _loaded, _set
    _loaded(browser, page.as_uri())
    for k, v in controls:
        _set(browser, k, v)
    return browser.execute_script("return document.body.dataset.state"), browser.find_element("id", "error").text


def test_a_toy_familys_calculator_page(toy_page, browser, capsys):
    """The calculator page of a toy model, generated from the toy's own terms without editing any file outside
    its package: every number the page shows is the command line's estimate (exact), under layouts, ZeRO,
    recomputation, schedules and conventions presets, and what the command line refuses the page refuses in
    its words (the toy's own layout rules among them)."""
    from test_page import _argv, _dom_exact
    from memsym.cli import main
    page, path = toy_page
    html = page.read_text(encoding="utf-8")
    assert f"{path}, a GQA + SwiGLU model" in html and "<script src" not in html
    for controls in TOY_PAGE:
        state, err = _page_estimate(browser, page, controls)
        assert (state, err) == ("ok", ""), (controls, err)
        assert main(["estimate", "--model", str(path), *_argv(controls), "--json"]) == 0
        want = json.loads(capsys.readouterr().out)
        assert int(browser.find_element("id", "v-stage").get_attribute("data-index")) == want["stage"]["index"]
        for k in ("non_moe", "moe", "total"):
            assert _dom_exact(browser, f"params-{k}") == want["params"][k], (controls, k)
        keys = ["weights", "gradients", "optimizer", "activations", "total", "activations_per_layer"]
        for k in keys + (["activations_per_microbatch"] if want["training"]["schedule"] else []):
            assert _dom_exact(browser, f"bytes-{k}") == want["bytes"][k], (controls, k)
        for end in ("low", "high"):
            assert float(_dom_exact(browser, f"peak-{end}")) == pytest.approx(want["overheads"][end]["peak"], rel=1e-15)
        assert "GQA + dense FFN" in browser.find_element("id", "results").text
    for controls in TOY_REFUSED:
        state, err = _page_estimate(browser, page, controls)
        assert main(["estimate", "--model", str(path), *_argv(controls)]) == 2
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and said[0].startswith("memsym estimate: error: "), said
        assert (state, err) == ("error", said[0][len("memsym estimate: error: "):]), controls


def test_the_registry_on_first_use_from_many_threads(tmp_path):
    """14 threads making their first call at once in a fresh process each read a DeepSeek-V3 and a DeepSeek-V4
    config.json: none finds the registry empty or half-filled (it was marked loaded before its families were
    registered: "model_type 'deepseek_v3' is not an architecture memsym covers ()").  The discovery of the families'
    packages is slowed, so the other threads arrive while the first registers them."""
    import os
    import subprocess
    data = Path(__file__).resolve().parent / "data"
    code = textwrap.dedent('''
        import pkgutil, sys, threading, time
        import memsym.api  # imported before the threads start: they meet at the registry, not at an import
        from derivations import families

        listing = pkgutil.iter_modules
        def slow(path=None, prefix=""):  # the first thread is inside the registry's discovery for 0.3 s
            time.sleep(0.3)
            return listing(path, prefix)

        pkgutil.iter_modules = slow
        barrier, out = threading.Barrier(14), []

        def first_call(path):
            barrier.wait()
            try:
                out.append(memsym.api.load_model(path).family)
            except Exception as e:
                out.append(repr(e))

        paths = [sys.argv[1], sys.argv[2]] * 7
        threads = [threading.Thread(target=first_call, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(sorted(out))
    ''')
    root = str(Path(__file__).resolve().parents[1])  # this checkout (derivations/ beside tests/)
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code, str(data / "tiny" / "config.json"),
                          str(data / "v4" / "config.json")], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(["deepseek", "deepseek_v4"] * 7))
