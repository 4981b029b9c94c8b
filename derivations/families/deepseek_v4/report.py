"""The sections of a DeepSeek-V4 report (memsym/report/sections.py reads ``SECTIONS``), as data (report.toml): V4's
own equations, in the order a reader builds the memory of one device."""
from pathlib import Path

from symbolic import tomlfile

with tomlfile.package_data(Path(__file__).with_name("report.toml")) as _data:
    SECTIONS = tuple({k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()} for spec in _data["sections"])
