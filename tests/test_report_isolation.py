"""A report's contents do not depend on what ran before in the same process."""
from derivations import config as cfg
from derivations.assembly.device import estimate
from memsym import report as rp
from memsym.cli import build_parser
from memsym.commands import common


def _training(preset: str) -> cfg.Training:
    """The Training of ``memsym estimate --conventions PRESET``, as the command line builds it."""
    args = build_parser().parse_args(["estimate", "--conventions", preset])
    return common.configuration(args).training  # resolved as the command line resolves it


def _markdown() -> str:
    return rp.render(rp.build_report(rp.Context.create()), "md")


def test_report_is_the_same_after_estimates_under_every_conventions_preset():
    before = _markdown()
    model, layout = cfg.load_model("deepseek-v3"), cfg.Layout()
    trainings = [_training(p) for p in cfg.CONVENTION_PRESETS]
    # the presets differ (paper, megatron, modelzoo, transformers, ...)
    assert len(set(trainings)) == len(cfg.CONVENTION_PRESETS) >= 4
    for training in trainings:
        estimate(model, layout, training)
    assert _markdown() == before
