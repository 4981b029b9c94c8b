"""A :class:`Context`: one configuration (model, layout, training, stage) and its substitution ``subs``."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, Optional

import sympy as sp

from derivations import config as cfg
from derivations import configured
from derivations import notation as nt
from derivations.assembly.conventions import megatron_substitution
from derivations.assembly.device import default_stage
from symbolic.numeric import exact, rational

from .blocks import Equation, Table
from .equations import equation
from .tables import TABLES
from .text import report_names

#: Roles of the symbols substituted in the paper's factored form (Tables 5 and 7); model dimensions stay symbols.
DISPLAY_ROLES = ("parallel", "bytes")
STAGE_ROLE = "stage"


@dataclass
class Context:
    """One configuration: the model, the layout, the training settings and the stage."""

    model: cfg.ModelSpec
    layout: cfg.Layout
    training: cfg.Training
    stage: cfg.StageComposition
    subs: Dict = field(repr=False)
    _terms: object = field(default=None, repr=False)

    @classmethod
    def create(cls, model=None, layout=None, training=None, stage: Optional[int] = None) -> "Context":
        """Validate and build the context; ``model``: a ModelSpec, preset or config.json; ``stage``: as estimate's."""
        model = cfg.load_model(model) if isinstance(model, str) else (model or cfg.load_model("deepseek-v3"))
        layout = layout or cfg.Layout()
        training = training or cfg.Training()
        cfg.validate_layout(model, layout, training.seq)
        cfg.validate_training(training)
        comp = cfg.stage(model, layout, default_stage(layout) if stage is None else stage)
        return cls(model, layout, training, comp, cfg.substitution(model, layout, training, comp))

    @property
    def terms(self):
        if self._terms is None:
            self._terms = configured(self.model, self.training)  # this configuration's terms only
        return self._terms

    @property
    def names(self) -> Dict:
        """The report's LaTeX names of the registry's symbols (made again when the registry grew)."""
        known = self.__dict__.get("_names")
        if known is None or known[0] != len(nt.REGISTRY):
            known = self.__dict__["_names"] = (len(nt.REGISTRY), report_names())
        return dict(known[1])

    def value_of(self, sym):
        """Exact value of a symbol at this configuration (derived symbols evaluated), or None."""
        if sym in self.subs:
            return Fraction(self.subs[sym])
        if sym in nt.DEFINITIONS:
            return self.exact(nt.DEFINITIONS[sym])
        return None

    def subs_for(self, term) -> Dict:
        """The substitution a term is evaluated at: this stage's, or for scope 'model' Megatron's whole model's."""
        if getattr(term, "scope", "stage") != "model":
            return self.subs
        return megatron_substitution(self.model, self.layout, self.training)

    def display_subs(self, with_stage: bool, subs: Optional[Dict] = None) -> Dict:
        """The substitution for the paper's factored form: parallel degrees, bytes (and the stage composition)."""
        roles = DISPLAY_ROLES + ((STAGE_ROLE,) if with_stage else ())
        subs = self.subs if subs is None else subs
        out = {k: v for k, v in subs.items() if k.name in nt.REGISTRY and nt.REGISTRY[k.name].role in roles}
        edp = self.value_of(nt.EDP)
        if edp is not None:
            out[nt.EDP] = sp.Rational(edp.numerator, edp.denominator)
        # DeepSeek: the paper writes d_h for d_v
        if getattr(self.model, "d_v", None) == getattr(self.model, "d_h", None):
            out[nt.d_v] = nt.d_h
        return out

    def exact(self, term_or_expr, subs: Optional[Dict] = None) -> Optional[Fraction]:
        """Exact value at this configuration (or at ``subs``), None when a symbol is unset."""
        subs = self.subs if subs is None else subs
        expr = getattr(term_or_expr, "base_expr", None)
        if expr is not None:  # a term's expression as built (its derived symbols are in subs)
            value = rational(expr, subs)
            if value is not None:
                return value
        try:
            return exact(term_or_expr, subs)
        except cfg.ConfigError:
            return None

    def equation(self, term_id: str, with_stage: Optional[bool] = None, parts: bool = False) -> Equation:
        """The equation block of a term (paper form, closed form, value)."""
        term = self.terms[term_id]
        if with_stage is None:
            with_stage = any(s in term.base_expr.free_symbols for s in (nt.L_d, nt.L_m, nt.e_E, nt.e_H)) and \
                not term_id.startswith("params.")
        return equation(self, term, with_stage, parts)

    def table(self, key: str) -> Table:
        """A table by key (see :data:`memsym.report.tables.TABLES`)."""
        if key not in TABLES:
            raise KeyError(f"unknown table {key!r}; tables: {', '.join(TABLES)}")
        return TABLES[key](self)
