"""The page's option data: the options of ``estimate`` with their values and defaults (:func:`options`), the limits
and Python text rules its fields and a pasted config.json are read with (:func:`inputs`, limits.py) and the GPUs."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
from fractions import Fraction
from typing import Dict, List

from derivations import config as cfg
from derivations import families as _families
from derivations.activations import shape
from derivations import evaluate as ev
from derivations.activations.view import View
from derivations.assembly import device, offload, quantized, schedules, sides, step_names
from derivations.assembly.runtime import buffers_term
from derivations.config import defaults, hfconfig, layout, limits as L, quantization, resolve, switches, training
from derivations.config import values
from derivations.config.gpus import presets as gpu_presets
from derivations.config.hfconfig import covered
from derivations.config.recipes import RECIPES
from derivations.families import get as _family
from derivations.notation import EXTENSION_DEFAULTS, PAPER_BYTES
from memsym import argtypes
from symbolic import errors, jsonfile
from symbolic.exact import exact_text, fmt_gib
from symbolic.numeric import exact

from .pyjs import Printed

#: The family whose configs the page reads when pasted (DeepSeek's from_fields, printed: :func:`checks_js`).
DEEPSEEK = _family("deepseek")


def options() -> Dict:
    """The options of ``estimate`` the page offers, their values and defaults (from derivations)."""
    lay, tr = cfg.Layout(), cfg.Training()
    return {
        "default_model": cfg.DEFAULT_MODEL, "model_types": list(DEEPSEEK.model_types),
        # what the command line's reader says of a config it does not read (hfconfig.from_dict: every family's)
        "all_model_types": list(_families.model_types()), "covered": covered(),
        "other_families": {mt: f.title for f in _families.all() if f is not DEEPSEEK for mt in f.model_types},
        "wrappers": [list(w) for w in DEEPSEEK.wrappers],
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "etp": lay.etp, "cp": lay.cp},
        "training": {"mbs": tr.mbs, "seq": tr.seq, "zero": tr.zero, "recompute": tr.recompute,
                     "attention": tr.attention, "imbalance": exact_text(tr.imbalance)},
        "zero_names": {str(k): v for k, v in cfg.ZERO_NAMES.items()},
        "recompute": list(cfg.RECOMPUTE), "recompute_ops": dict(cfg.RECOMPUTE_OPS),
        "attention": list(cfg.ATTENTION), "schedules": list(cfg.SCHEDULES), "dtypes": dict(cfg.DTYPES),
        "paper_bytes": {k.name: exact_text(v) for k, v in PAPER_BYTES.items()},
        "extension_defaults": {k.name: exact_text(v) for k, v in EXTENSION_DEFAULTS.items()},
        "switches": {k: {"option": s.option, "values": list(s.values), "side": s.side, "help": s.help}
                     for k, s in cfg.CONVENTION_SWITCHES.items()},
        "convention_presets": list(cfg.CONVENTION_PRESETS), "bytes_conventions": list(cfg.BYTES_CONVENTIONS),
        "recipes": {k: {"device": list(r.device) if r.device else None, "model": r.options.get("model"),
                        "family": _recipe_family(r)} for k, r in RECIPES.items()},
        "gib": cfg.GiB,
        # --runtime-buffers: the per-device runtime buffers' bytes of each value (derivations/assembly/runtime.py)
        "runtime_buffers": {v: exact_text(exact(buffers_term(v), {}))
                            for v in cfg.CONVENTION_SWITCHES["runtime_buffers"].values if v != "none"},
    }


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


def checks_js() -> str:
    """The command line's readers and checks the page runs, printed from their Python (memsym.page.pyjs.Printed): a
    pasted config.json's (hfconfig.from_dict, DeepSeek's from_fields), the fields' argparse types (memsym/argtypes.py)
    and the layout's, the training's and the schedule's validation; what the page has its own of is named here."""
    config = DEEPSEEK.module("config")
    p = Printed({errors.ConfigError: "py.error", argparse.ArgumentTypeError: "py.argerror", Fraction: "py.Fraction",
                 dataclasses.replace: "py.replace", itertools.accumulate: "py.accumulate", covered: "FAMILIES.covered",
                 resolve._family_of: "FAMILIES.family_of",
                 shape.of_model: "((model) => model.family)",
                 shape.family: "FAMILIES.find", shape.inert: "((f) => Object.values(DATA.families[f].inert))",
                 # the page's compositions: {index, layers: [first, end), dense, moe, ...} (runtime.js compose)
                 layout.stages: "stages", offload.kept_tensors: "keptTensors", device._kinds: "keptKinds",
                 ev.step: "stepMoments", ev.device_inputs: "((f) => [DATA.families[f].device.kinds, "
                                                          "DATA.families[f].device.chunks])",
                 # evaluate.inflight: the generated schedules' formulas, the same in every family's module
                 ev.inflight: "((name, pp, i, m, vpp) => Object.values(ASSEMBLY)[0].inflight(name, { PP: Q.n(pp), "
                              "i_s: Q.n(i), n_mb: m === null ? INF : Q.n(m), VPP: Q.n(vpp) }))",
                 View.of: "((t) => new View({ recompute: t.recompute, ops: t.recompute_ops }))",
                 layout.compose: "((m, r, first, last, index) => compose(m, [r.start, r.stop], first, last, index))",
                 **{getattr(_families, k): f"FAMILIES.{k}" for k in ("wrapper", "for_model_type", "model_types",
                                                                       "get", "find")}})
    p.add(hfconfig.Fields, ["__init__", "err", "int", "choice", "bool", "fp8_block", "type_name", "shown"])
    p.add(config.ModelSpec, ["family", "q_lora", "indexer", "routing_bias", "groups", "group_limited", "routing",
                             "structure", "named", "layer_kinds", "layer_features", "mtp_layer_features", "unread"])
    p.add(L.Limit, ["check", "message"])
    p.add(layout.Layout, ["SP", "named"])
    p.add(training.Training, ["with_bytes", "named"])
    p.add(switches.Conventions, [])
    for fn in (hfconfig._err, hfconfig.from_dict, config.from_fields, config.shape_name, config._indexer,
               config._indexer_types, config._layer_kinds, config._features, L._show, layout.positive_int,
               layout.validate_layout, layout._edp, layout.stage_layers, sides.check_mtp,
               switches.validate_conventions, training.with_global_batch, training.validate_training,
               training._short, training.parse_recompute, training.parse_offload, training._validate_recipe,
               argtypes._int_text, argtypes.int_list, argtypes.layer_counts, argtypes.imbalance_factor,
               argtypes.bounded_text, resolve.resolved, resolve.preset_name, resolve._over_recipe,
               resolve._dp_of_gpus, resolve.check_conflicts, resolve.training_of, resolve.conventions_of,
               defaults.applied, defaults.named_by, training.parse_cuda_graphs, shape.check_options):
        p.add(fn)
    # the device's gathering steps of device._estimate_at the page runs (runtime.js device): --virtual-layers' chunks
    # and interleaved order, the MTP modules on the last stage, the stage asked and the options' refusals
    p.add(sides.WeightSide, [])
    p.add(View, ["dropped"])
    p.add(schedules.Chunk, [])
    for fn in (schedules._warm, schedules.interleaved_order, schedules.distinct_states, schedules.backward_states,
               schedules.virtual_chunks, schedules.rank_chunks, schedules.virtual_groups, layout.layers_label,
               sides.mtp_stage_shift, sides.weight_side, sides.weight_side_of, _families.unsupported,
               device.check_recipe_rank, offload.check_megatron_layers, step_names.trainings, switches.with_switch,
               offload.moment_parts, offload.step_moment, quantized._rows, quantization.recipe, schedules.chunks,
               schedules.held_stages, schedules.interleaved_peak, device.missing_symbol, device.step_excess,
               device.step_inputs, step_names.framework_of, step_names.policy_of, step_names.routing,
               step_names.term_id, step_names.indicators, values.named, sides.megatron_values, layout.whole_model):
        p.add(fn)
    for fn, name in ((layout.stage, "layout_stage"), (offload.tensors, "offload_tensors"),
                     (offload.per_layer, "offload_per_layer"), (quantized.parts, "quantized_parts"),
                     (quantized.per_layer, "quantized_per_layer"), (quantized.copies, "quantized_copies"),
                     (schedules.validate, "validate_schedule"),
                     (argtypes.positive_int, "arg_positive_int"), (argtypes.nonneg_int, "arg_nonneg_int"),
                     (argtypes._shown, "arg_shown"),
                     (L.option, "limit_option"), (jsonfile.shown, "json_shown"), (jsonfile.type_name, "typeName")):
        p.add(fn, name=name)
    return p.js()


def _recipe_family(recipe):
    """The family (name, title) of a recipe's model, for resolve's recipe-against-model check on a page of other
    models (resolve.resolved, resolve._family_of): None when the recipe names no preset."""
    fam = resolve._family_of(recipe.options.get("model"))
    return None if fam is None else {"name": fam.name, "title": fam.title}
