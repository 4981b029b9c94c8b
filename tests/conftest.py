import pytest

from derivations import config as cfg


@pytest.fixture(scope="session")
def v3():
    return cfg.PRESETS["deepseek-v3"]


@pytest.fixture(scope="session")
def terms(v3):
    from derivations import build
    return build(v3)


@pytest.fixture(scope="session")
def paper_layout():
    return cfg.Layout()
