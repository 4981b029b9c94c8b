"""memsym: the application (command line, report) and the public Python API.

    import memsym
    r = memsym.estimate("deepseek-v3", dp=32, tp=2, pp=16, ep=8, zero=1)
    r.params.total, r.bytes.optimizer, r.to_dict()   # == memsym estimate ... --json

Also ``memsym.params``, ``fit``, ``search``, ``sensitivity``, ``compare``, ``verify``,
``terms`` and ``load_model`` (:mod:`memsym.api`).  Importing this package is instant: sympy,
numpy and the derivations are imported by the functions that need them.
"""
__version__ = "0.1.0"

_API = ("Result", "Verdict", "estimate", "params", "fit", "search", "sensitivity", "compare", "verify", "terms",
        "load_model", "ConfigError")


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'memsym' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
