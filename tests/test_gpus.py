"""GPU presets (derivations/config/gpus.toml): one capacity kind, each with the log it was read from (issue 46 item
6), explicit card names and a bare ambiguous name refused; rates with what was consulted (issue 45)."""
from fractions import Fraction

import pytest

from derivations.config import gpus
from symbolic.errors import ConfigError

GiB = 2 ** 30
#: cudaMemGetInfo's totals as PyTorch prints them in the published logs (GiB, two decimals), written by hand
LOGGED = {"a100-40gb": "39.50", "a100-80gb": "79.25", "h100-80gb": "79.11", "h800": "79.11", "h200": "139.80",
          "b200": "178.35", "b300": "267.69", "gb200": "184.31", "gb300": "276.50", "mi300x": "191.98",
          "mi355x": "287.98"}


def test_every_capacity_is_one_kind_the_logged_total_less_the_context():
    assert set(LOGGED) == set(gpus.presets())
    for key, text in LOGGED.items():
        g = gpus.gpu(key)
        assert g.total == int(Fraction(text) * GiB), key
        assert g.capacity == g.total - 400_000_000, key  # pytorch/pytorch#109888: about 400 MB
        assert f"{text} GiB" in g.source and g.rates_source, key


def test_the_h800_is_judged_as_the_h100_it_is_built_from():
    assert gpus.gpu("h800").capacity == gpus.gpu("h100").capacity


@pytest.mark.parametrize("name", ["a100-40gb", "A100-80GB", "a100_40gb", "h100", "gb200-nvl72"])
def test_explicit_names_resolve(name):
    assert gpus.gpu(name).key in gpus.presets()


def test_a_bare_ambiguous_name_is_refused_naming_the_cards():
    with pytest.raises(ConfigError) as e:
        gpus.gpu("a100")
    assert "a100-40gb" in str(e.value) and "a100-80gb" in str(e.value)
