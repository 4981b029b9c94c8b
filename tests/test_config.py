import pytest

from derivations import config as cfg


def test_paper_pipeline_split(v3):
    split = [len(r) for r in cfg.stage_layers(v3, cfg.Layout(pp=16))]
    assert split == [4] * 15 + [1]


@pytest.mark.parametrize("pp", range(1, 62))
def test_every_split_covers_all_layers_once(v3, pp):
    ranges = cfg.stage_layers(v3, cfg.Layout(pp=pp))
    assert len(ranges) == pp
    assert [i for r in ranges for i in r] == list(range(v3.l))
    assert all(len(r) >= 1 for r in ranges)


def test_stage_composition(v3):
    st = cfg.stages(v3, cfg.Layout())
    assert (st[0].dense, st[0].moe, st[0].embedding, st[0].head) == (3, 1, True, False)
    assert (st[1].dense, st[1].moe, st[1].embedding, st[1].head) == (0, 4, False, False)
    assert (st[15].dense, st[15].moe, st[15].embedding, st[15].head) == (0, 1, False, True)


@pytest.mark.parametrize("kw, constraint", [
    (dict(tp=3), "tp-divides-heads"),
    (dict(ep=7), "ep-divides-experts"),
    (dict(dp=3), "edp-integer"),
    (dict(pp=62), "pp-layers"),
    (dict(dp=0), "positive-integer"),
    (dict(tp=2, sp=4), "sp"),
    (dict(etp=3, dp=24), "etp-divides-expert"),
    (dict(pp=2, layers_per_stage=(30, 30)), "layers-per-stage"),
])
def test_invalid_layouts_name_the_constraint(v3, kw, constraint):
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.validate_layout(v3, cfg.Layout(**kw), 4096)
    assert exc.value.constraint == constraint
    assert str(exc.value)


def test_cp_must_divide_sequence(v3):
    with pytest.raises(cfg.ConfigError, match="CP=3"):
        cfg.validate_layout(v3, cfg.Layout(cp=3), 4096)


def test_explicit_split(v3):
    lay = cfg.Layout(pp=2, layers_per_stage=(31, 30))
    st = cfg.stages(v3, lay)
    assert (st[0].dense, st[0].moe, st[1].moe) == (3, 28, 30)


def test_training_validation():
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(zero=4))
    with pytest.raises(cfg.ConfigError):
        cfg.validate_training(cfg.Training(recompute="half"))


def test_unknown_model():
    with pytest.raises(cfg.ConfigError, match="unknown model"):
        cfg.load_model("gpt-5")


@pytest.mark.parametrize("text, value", [("80GiB", 80 * 2 ** 30), ("80GB", 80 * 10 ** 9), ("512MiB", 2 ** 29),
                                         ("141gb", 141 * 10 ** 9), ("1TiB", 2 ** 40), ("1.5 GiB", 3 * 2 ** 29),
                                         ("2TB", 2 * 10 ** 12), ("0.3KiB", 307), ("100B", 100)])
def test_parse_size(text, value):
    assert cfg.parse_size(text) == value


@pytest.mark.parametrize("text", ["eighty gigs", "80", "80g", "80 G", "1e9GB", "-1GiB", "0B", "80GiBs", "٨٠GiB"])
def test_parse_size_rejects_garbage_and_bare_numbers(text):
    with pytest.raises(cfg.ConfigError):
        cfg.parse_size(text)


def test_sequence_parallelism_must_divide_the_sequence(v3):
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.validate_layout(v3, cfg.Layout(tp=2), 4095)
    assert exc.value.constraint == "sp-divides-seq"
    cfg.validate_layout(v3, cfg.Layout(tp=2, sp=1), 4095)


SPLIT = {
    "model": ["ModelSpec"],
    "presets": ["DEFAULT_MODEL", "PRESETS", "load_model"],
    "layout": ["Layout", "StageComposition", "compose", "composition_names", "layer_range", "stage", "stage_layers",
               "stages", "validate_layout", "whole_model"],
    "training": ["ATTENTION", "DTYPES", "OFFLOAD_MODULES", "RECOMPUTE", "RECOMPUTE_OPS", "SCHEDULES", "ZERO_NAMES",
                 "Training", "parse_cuda_graphs", "parse_offload", "parse_recompute", "validate_training"],
    "switches": ["BYTES_CONVENTIONS", "BYTES_HELP", "CONVENTION_ORDER", "CONVENTION_PRESETS", "CONVENTION_SOURCES",
                 "CONVENTION_SWITCHES", "MTP_HELP", "NAMING_PRESETS", "RANK_ZERO", "Conventions", "SwitchSpec",
                 "validate_conventions"],
}


def test_config_is_the_single_import_point():
    """Each idea lives in its own module; derivations.config re-exports its names."""
    import importlib
    for module, names in SPLIT.items():
        mod = importlib.import_module(f"derivations.config.{module}")
        for name in names:
            assert getattr(cfg, name) is getattr(mod, name), f"{module}.{name}"
    assert sorted(cfg.__all__) == sorted([n for ns in SPLIT.values() for n in ns]
                                         + ["ConfigError", "GiB", "parse_size", "substitution", "named",
                                            "LINEAR_RECIPES"])
    from derivations.config import quantization
    assert cfg.LINEAR_RECIPES is quantization.RECIPES  # Transformer Engine's recipes (--linear-recipe)
    assert cfg.GiB == 2 ** 30 and cfg.parse_size("1GiB") == cfg.GiB


def test_a_gpu_name_two_cards_carry_is_refused(capsys):
    """--gpu a100 was silently the 80 GB card; the 40 GB card is another (issue 46 item 6)."""
    from clirun import run
    code, out, err = run(capsys, "estimate", "--gpu", "a100")
    assert code == 2 and out == "" and "a100-40gb, a100-80gb" in err
    for name in ("a100-40gb", "A100-80GB", "a100_80gb"):
        assert run(capsys, "estimate", "--gpu", name)[0] == 0
