"""The sections of a DeepSeek-V4 report (memsym/report/sections.py reads ``SECTIONS``), as data (report.toml): V4's
own equations, in the order a reader builds the memory of one device."""
import tomllib
from pathlib import Path

with open(Path(__file__).with_name("report.toml"), "rb") as _fh:
    SECTIONS = tuple({k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
                     for spec in tomllib.load(_fh)["sections"])
