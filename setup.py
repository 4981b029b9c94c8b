"""The packages of a wheel, found by setuptools (everything else is in pyproject.toml): every folder under
memsym/, derivations/ and symbolic/ (a data folder such as derivations/config/convention_presets included), and
the two data folders at the repository's root, paper/ and templates/, shipped as memsym_paper and memsym_templates
(pyproject's package-dir; symbolic/resources.py finds them). pyproject.toml's ``[tool.setuptools.packages.find]``
cannot ship a folder under another name, hence this file."""
from setuptools import find_namespace_packages, setup

CODE = ["memsym", "memsym.*", "derivations", "derivations.*", "symbolic", "symbolic.*"]
DATA = {"memsym_paper": "paper", "memsym_templates": "templates"}

setup(packages=find_namespace_packages(include=CODE, exclude=["*.__pycache__"])
      + [f"{name}{'.' + sub if sub else ''}" for name, folder in DATA.items()
         for sub in ["", *find_namespace_packages(where=folder, exclude=["build", "build.*", "*.__pycache__"])]])
