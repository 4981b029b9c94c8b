"""Configurations (model, parallel layout, training, conventions) as substitutions of the symbolic terms, never
rebuilding them: the single import point ``from derivations import config as cfg``.  Invalid input raises
ConfigError naming the constraint that failed.
"""
from __future__ import annotations

from typing import Dict, Optional

from symbolic.errors import ConfigError
from symbolic.units import GiB, parse_size

from derivations.config.values import named, symbol_keyed
from derivations.config.layout import (Layout, StageComposition, compose, composition_names, layer_range, stage,
                                       stage_layers, stages, validate_layout, whole_model)
from derivations.config.model import ModelSpec
from derivations.config.presets import DEFAULT_MODEL, PRESETS, load_model
from derivations.config.switches import (BYTES_CONVENTIONS, BYTES_HELP, CONVENTION_ORDER, CONVENTION_PRESETS,
                                         CONVENTION_SOURCES, CONVENTION_SWITCHES, MTP_HELP, NAMING_PRESETS,
                                         RANK_ZERO, Conventions, SwitchSpec, validate_conventions)
from derivations.config.training import (ATTENTION, DTYPES, OFFLOAD_MODULES, RECOMPUTE, RECOMPUTE_OPS, SCHEDULES,
                                         ZERO_NAMES, Training, parse_cuda_graphs, parse_offload, parse_recompute,
                                         validate_training)
from derivations.config.quantization import RECIPES as LINEAR_RECIPES

__all__ = ["DEFAULT_MODEL", 
    "ConfigError", "GiB", "parse_size", "substitution", "named",
    # model and presets
    "ModelSpec", "PRESETS", "load_model",
    # layout and stages
    "Layout", "StageComposition", "compose", "composition_names", "layer_range", "stage", "stage_layers", "stages",
    "validate_layout", "whole_model",
    # conventions
    "BYTES_CONVENTIONS", "BYTES_HELP", "CONVENTION_ORDER", "CONVENTION_PRESETS", "CONVENTION_SOURCES",
    "CONVENTION_SWITCHES", "MTP_HELP", "NAMING_PRESETS", "RANK_ZERO", "Conventions", "SwitchSpec",
    "validate_conventions",
    # training
    "ATTENTION", "DTYPES", "OFFLOAD_MODULES", "RECOMPUTE", "RECOMPUTE_OPS", "SCHEDULES", "ZERO_NAMES", "Training",
    "parse_cuda_graphs", "parse_offload", "parse_recompute", "validate_training", "LINEAR_RECIPES",
]


def substitution(model: ModelSpec, layout: Optional[Layout] = None, training: Optional[Training] = None,
                 composition: Optional[StageComposition] = None) -> Dict:
    """The full substitution symbol -> exact value for a configuration (:func:`named`, keyed by symbol)."""
    return symbol_keyed(named(model, layout, training, composition))
