"""The page's option data: the options of ``estimate`` with their values and defaults (:func:`options`), the limits
and Python text rules its fields and a pasted config.json are read with (:func:`inputs`, limits.py) and the GPUs."""
from __future__ import annotations

import itertools
import json
from typing import Dict, List

from derivations import config as cfg
from derivations import families as _families
from derivations.config import limits as L
from derivations.assembly.runtime import buffers_term
from derivations.config.gpus import presets as gpu_presets
from derivations.config.recipes import RECIPES
from derivations.config.defaults import RUN_DEFAULTS, RUN_OPTIONS
from derivations.config.hfconfig import covered
from derivations.config.presets import PRESETS
from derivations.families import get as _family
from derivations.notation import EXTENSION_DEFAULTS, PAPER_BYTES
from symbolic.exact import exact_text, fmt_gib
from symbolic.numeric import exact

#: The family the page reads configs of (its JavaScript reader maps DeepSeek's fields: templates/page/).
DEEPSEEK = _family("deepseek")


def options() -> Dict:
    """The options of ``estimate`` the page offers, their values and defaults (from derivations)."""
    lay, tr, config = cfg.Layout(), cfg.Training(), DEEPSEEK.module("config")
    jsonable = lambda v: json.loads(json.dumps(v, default=exact_text))  # noqa: E731 (a Fraction as its text)
    return {
        "default_model": cfg.DEFAULT_MODEL,
        "model_types": list(DEEPSEEK.model_types), "topk_methods": list(DEEPSEEK.topk_methods),
        # what the command line's reader says of a config it does not read (hfconfig.from_dict: every family's)
        "all_model_types": list(_families.model_types()), "covered": covered(),
        "other_families": {mt: f.title for f in _families.all() if f is not DEEPSEEK for mt in f.model_types},
        "wrappers": [list(w) for w in DEEPSEEK.wrappers],
        "scoring_funcs": list(config.SCORING_FUNCS),
        # config.py's DSA indexer: {model_type: [defaults, attention class]}, its fields and the sharing fields
        "dsa": {mt: [list(d), a] for mt, (d, a) in config.DSA.items()},
        "index_fields": [list(f) for f in config.INDEX_FIELDS],
        "sharing_fields": list(config.SHARING_FIELDS),
        "dimensions": [list(d) for d in DEEPSEEK.dimensions],
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "etp": lay.etp, "cp": lay.cp},
        "training": {"mbs": tr.mbs, "seq": tr.seq, "zero": tr.zero, "recompute": tr.recompute,
                     "attention": tr.attention, "imbalance": exact_text(tr.imbalance)},
        # derivations/config/defaults.py: what a named run takes where nobody set it
        "run": {"options": list(RUN_OPTIONS), "defaults": dict(RUN_DEFAULTS)},
        "zero_names": {str(k): v for k, v in cfg.ZERO_NAMES.items()},
        "recompute": list(cfg.RECOMPUTE), "recompute_ops": dict(cfg.RECOMPUTE_OPS),
        "attention": list(cfg.ATTENTION), "schedules": list(cfg.SCHEDULES), "dtypes": dict(cfg.DTYPES),
        "paper_bytes": {k.name: exact_text(v) for k, v in PAPER_BYTES.items()},
        "extension_defaults": {k.name: exact_text(v) for k, v in EXTENSION_DEFAULTS.items()},
        "switches": {k: {"option": s.option, "values": list(s.values), "side": s.side, "help": s.help}
                     for k, s in cfg.CONVENTION_SWITCHES.items()},
        "convention_presets": {k: {kk: jsonable(vv) for kk, vv in p.items()}
                               for k, p in cfg.CONVENTION_PRESETS.items()},
        "bytes_conventions": {k: [v[0], v[1]] for k, v in cfg.BYTES_CONVENTIONS.items()},
        "rank_zero": dict(cfg.RANK_ZERO),  # resolve.training_of: the ZeRO stage a --rank is
        "recipes": {k: {"description": r.description, "options": {kk: jsonable(vv) for kk, vv in r.options.items()},
                        "device": list(r.device) if r.device else None, "family": _recipe_family(r)}
                    for k, r in RECIPES.items()},
        "gib": cfg.GiB,
        # --runtime-buffers: the per-device runtime buffers' bytes of each value (derivations/assembly/runtime.py)
        "runtime_buffers": {v: exact_text(exact(buffers_term(v), {}))
                            for v in cfg.CONVENTION_SWITCHES["runtime_buffers"].values if v != "none"},
    }


def _recipe_family(recipe):
    """[name, title] of the family of a recipe's model (a preset), or None (resolve.py refuses it for another's)."""
    model = recipe.options.get("model")
    if model not in PRESETS:
        return None
    fam = _family(PRESETS[model].family)
    return [fam.name, fam.title]


def _limit(lim) -> Dict:
    return {"name": lim.name, "low": lim.low, "high": lim.high, "why": lim.why, "domain": lim.domain}


def _ranges(pred) -> List[List[int]]:
    """The code points where ``pred`` holds, as [first, last] ranges (runs of consecutive ones)."""
    held = enumerate(c for c in range(0x110000) if pred(chr(c)))
    runs = (list(run) for _, run in itertools.groupby(held, lambda ic: ic[1] - ic[0]))
    return [[run[0][1], run[-1][1]] for run in runs]


def inputs() -> Dict:
    """What the page reads its fields and a pasted config.json with: limits.py's limits and the Python text rules
    its messages depend on (str.strip's white space, repr's printable characters)."""
    return {
        "options": {k: _limit(v) for k, v in L.OPTIONS.items()},
        "fields": {k: _limit(v) for k, v in L.FIELDS.items()},
        "list_lengths": dict(L.LIST_LENGTHS),
        "max_digits": L.MAX_DIGITS, "max_arg_chars": L.MAX_ARG_CHARS, "max_number_chars": L.MAX_NUMBER_CHARS,
        "layers": L.LAYERS,
        "imbalance": L.IMBALANCE, "int_pattern": L.INT_PATTERN, "decimal_pattern": L.DECIMAL_PATTERN,
        "config_bytes": L.CONFIG_BYTES, "config_depth": L.CONFIG_DEPTH, "config_digits": L.CONFIG_DIGITS,
        # where CPython's json reader raises RecursionError under `memsym estimate` (the default limit, 1000, less
        # its frames below json.loads): only a file invalid beyond that depth is told apart by it
        "json_recursion": 1000 - 13,
        "space": _ranges(str.isspace), "nonprintable": _ranges(lambda c: not c.isprintable()),
    }


def gpus() -> List[Dict]:
    """The GPU table of the fit verdict: the ``--gpu`` presets (derivations/config/gpus.toml)."""
    return [{"id": g.key, "name": g.name, "bytes": g.capacity, "source": g.source,
             "capacity": f"{fmt_gib(g.capacity)} GiB usable, total less context"}
            for g in gpu_presets().values()]
