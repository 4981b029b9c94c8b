"""Model families as modules (derivations/families): the registry, the DeepSeek family's declaration
as the config reader uses it, a family found by being a package, and switches declared once
(derivations/config/switches.py: a SwitchSpec's ``exists`` tags, its compare label, the Conventions
fields made from the switches)."""
from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

from derivations import families
from derivations.activations.view import EXISTS, View
from derivations.config import hfconfig
from derivations.config.model import ModelSpec
from derivations.config.switches import CONVENTION_SWITCHES, Conventions


def test_the_deepseek_family_is_what_the_config_reader_reads():
    fam = families.get("deepseek")
    assert fam.model_types == families.model_types() == ("deepseek_v2", "deepseek_v3", "kimi_k2")
    assert fam.module("config").ModelSpec is ModelSpec and ModelSpec.family == "deepseek"
    assert families.for_model_type("kimi_k2") is fam and families.for_model_type("llama") is None
    spec_fields = {f.name for f in dataclasses.fields(ModelSpec)}
    assert {attr for _, attr, _ in fam.dimensions} <= spec_fields
    assert fam.attention == "mla" and fam.flags == ("q_lora", "routing_bias", "tied")
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


def test_a_family_is_a_package_with_its_declaration(tmp_path, monkeypatch):
    """A toy family written in a temporary package registers, builds its parameter terms from its own
    module, and refuses to take a model_type another family reads."""
    pkg = tmp_path / "toyfamily"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        from derivations.families import Family
        FAMILY = Family(name="toy", title="GQA + SwiGLU", short="GQA + SwiGLU", model_types=("toy_gqa",),
                        dimensions=(("hidden_size", "h", "hidden size h"),), topk_methods=(),
                        kinds=("gqa", "dense", "head"), parameters="toyfamily.parameters",
                        activations="toyfamily.activations", config="toyfamily.config", flags=("tied",))
    '''))
    (pkg / "parameters.py").write_text(textwrap.dedent('''
        import sympy as sp
        from symbolic.term import Part, Term
        h, n_kv, d_h, n_h = sp.symbols("h n_kv d_h n_h", positive=True, integer=True)
        def terms(registry, family, flags):
            yield Term("params." + family.attention, "grouped-query attention of one layer", "params", "toy",
                       (Part("W_Q", "W^Q", (h, n_h, d_h)), Part("W_KV", "W^K and W^V", (2, h, n_kv, d_h)),
                        Part("W_O", "W^O", (n_h, d_h, h))))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(families, "_REGISTRY", dict(families._REGISTRY))
    sys.modules.pop("toyfamily", None)
    import toyfamily
    fam = families.register(toyfamily.FAMILY)
    assert families.for_model_type("toy_gqa") is fam and families.get("deepseek").model_types[0] == "deepseek_v2"
    mod = fam.module("parameters")
    (term,) = mod.terms(None, fam, {"tied": False})
    assert term.id == "params.gqa"
    assert term.expr.subs({mod.h: 128, mod.n_h: 8, mod.n_kv: 2, mod.d_h: 16}) == \
        128 * 8 * 16 + 2 * 128 * 2 * 16 + 8 * 16 * 128
    with pytest.raises(ValueError, match="model_type 'kimi_k2' is read by family 'deepseek'"):
        families.register(dataclasses.replace(fam, name="clash", model_types=("kimi_k2",)))


def test_a_switch_is_declared_once():
    """Each switch's ``exists`` tags name its own values; the Conventions fields are the switches, with
    each switch's paper choice as the default; EXISTS holds a rule for every switch tag."""
    fields = {f.name: f.default for f in dataclasses.fields(Conventions)}
    assert fields == {**{n: s.default for n, s in CONVENTION_SWITCHES.items()}, "mtp": False}
    for name, spec in CONVENTION_SWITCHES.items():
        assert spec.label, name
        for tag, values in spec.exists.items():
            assert values and set(values) <= set(spec.values), (name, tag)
            for value in spec.values:  # the rule reads this switch: a tensor with the tag exists iff the value is listed
                view = View(conv=dataclasses.replace(Conventions(), **{name: value}))
                assert EXISTS[tag](view) == (value in values), (name, tag, value)
