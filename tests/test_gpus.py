"""GPU presets (derivations/config/gpus.toml): one capacity kind, each with the log it was read from (issue 46 item
6), explicit card names and a bare ambiguous name refused; rates with what was consulted (issue 45)."""
import pytest

from derivations.config import gpus
from symbolic.errors import ConfigError

MiB, GiB = 2 ** 20, 2 ** 30
#: the totals as the published logs print them (nvidia-smi's MiB; PyTorch's ROCm message in GiB, two decimals)
LOGGED = {"a100-40gb": 40960 * MiB, "a100-80gb": 81920 * MiB, "h100-80gb": 81559 * MiB, "h800": 81559 * MiB,
          "h200": 143771 * MiB, "b200": 183359 * MiB, "b300": 275040 * MiB, "gb200": 189471 * MiB,
          "gb300": 284208 * MiB}


def test_every_capacity_is_the_framework_kind_read_from_a_published_log():
    for key, g in gpus.presets().items():
        assert g.kind == "framework", key
        assert ("nvidia-smi" in g.source or "PyTorch" in g.source) and g.rates_source, key
    for key, total in LOGGED.items():
        assert gpus.gpu(key).capacity == total, key
    for key in ("mi300x", "mi355x"):
        assert f"{gpus.gpu(key).capacity / GiB:.2f} GiB" in gpus.gpu(key).source


def test_the_h800_is_judged_as_the_h100_it_is_built_from():
    assert gpus.gpu("h800").capacity == gpus.gpu("h100").capacity


@pytest.mark.parametrize("name", ["a100-40gb", "A100-80GB", "a100_40gb", "h100", "gb200-nvl72"])
def test_explicit_names_resolve(name):
    assert gpus.gpu(name).key in gpus.presets()


def test_a_bare_ambiguous_name_is_refused_naming_the_cards():
    with pytest.raises(ConfigError) as e:
        gpus.gpu("a100")
    assert "a100-40gb" in str(e.value) and "a100-80gb" in str(e.value)
