"""The view of the activation tensors a training keeps (pure: no sympy): :class:`View` decides from a tensor's tags
whether it is kept (:data:`EXISTS`, :meth:`View.keeps`) and names itself in ids and labels; how a kept tensor is retyped
or rescaled is in :mod:`derivations.activations.views`, which documents the tags."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Tuple

from derivations.config import CONVENTION_PRESETS, CONVENTION_SWITCHES, NAMING_PRESETS, Conventions

from derivations.constants import EXT, FLASH, MLA, MOE  # noqa: F401 (provenance labels)
from derivations.activations.op_sac import SAVES
CHECKPOINT_TAGS = frozenset({"layer_input", "routing", "head"})


# ----------------------------------------------------------------------------- views
@dataclass(frozen=True)
class View:
    """recompute: 'none' | 'full' | 'selective' | 'custom'; ops: the operators a custom policy recomputes; attention:
    'eager' | 'flash'; fp8: DeepSeek-V3's FP8 caching; conv: the activation switches of the conventions."""

    recompute: str = "none"
    ops: Tuple[str, ...] = ()
    attention: str = "eager"
    fp8: bool = False
    conv: Conventions = field(default_factory=Conventions)
    preset: str = field(default="", compare=False)  # the preset these conventions are (set by view_terms)

    def __post_init__(self):
        object.__setattr__(self, "conv", self.conv.side("activations"))

    @classmethod
    def of(cls, training) -> "View":
        """The view of a :class:`derivations.config.Training`."""
        return cls(training.recompute, tuple(training.recompute_ops), training.attention, bool(training.fp8),
                   getattr(training, "conventions", Conventions()))

    @property
    def dropped(self) -> frozenset:
        """Tags of the tensors this policy recomputes (full: everything but the checkpoints)."""
        return frozenset({"none": (), "selective": ("score",), "full": (), "custom": self.ops}[self.recompute])

    @property
    def checkpoints(self) -> frozenset:
        """Tags full recomputation keeps: two checkpoints and the routing, or (one) the input and head."""
        return CHECKPOINT_TAGS if self.conv.checkpoints == "two" else frozenset({"layer_input", "head"})

    def exists(self, tags) -> bool:
        """Whether a tensor with these tags exists under this kernel and these conventions."""
        return all(check(self) for tag, check in EXISTS.items() if tag in tags)

    def keeps(self, tags: Iterable[str]) -> bool:
        tags = set(tags)
        if not self.exists(tags):
            return False
        if "mask" in tags and self.conv.dropout_masks == "none":
            return False
        if self.recompute == "full":
            if self.conv.checkpoints == "one" and "sublayer_input" in tags:
                return False
            return bool(tags & self.checkpoints)
        if self.recompute == "selective" and self.conv.selective in SAVES:  # an op-level policy (op_sac.py)
            keep, unless = SAVES[self.conv.selective]
            return bool(tags & keep) and not tags & unless
        return not (tags & self.dropped)

    @property
    def conv_suffix(self) -> str:
        """Term-id suffix of the conventions: '', '.<preset>' or '.<token>.<token>...' (CONVENTION_SWITCHES tokens)."""
        changed = self.conv.changed()
        if not changed:
            return ""
        if self.preset:
            return "." + self.preset
        return "".join("." + CONVENTION_SWITCHES[k].tokens[v] for k, v in changed)

    @property
    def suffix(self) -> str:
        """Term-id suffix: '' | '.full' | '.selective' | '.custom-<op>-<op>', then '.flash' (only when the policy keeps
        the score tensors), '.fp8', then :attr:`conv_suffix`."""
        if self.recompute == "full":
            return ".full" + self.conv_suffix
        out = {"none": "", "selective": ".selective"}.get(self.recompute)
        if out is None:
            out = ".custom-" + "-".join(self.ops)
        if self.attention == "flash" and "score" not in self.dropped and not self.preset:
            out += ".flash"  # a preset's name says its kernel (named() checks it)
        if self.fp8:
            out += ".fp8"
        return out + self.conv_suffix

    @property
    def conv_label(self) -> str:
        """The conventions in words ('' for the paper's)."""
        changed = self.conv.changed()
        if not changed:
            return ""
        what = ", ".join(f"{CONVENTION_SWITCHES[k].option.lstrip('-')} {v}" for k, v in changed)
        return f"conventions {self.preset} ({what})" if self.preset else f"conventions: {what}"

    @property
    def label(self) -> str:
        pol = {"none": "no recomputation", "full": "full recomputation",
               "selective": f"selective recomputation ({self.conv.selective.replace('-', ' ')})"}.get(
            self.recompute, f"recomputing {', '.join(self.ops)}")
        extra = []
        if self.recompute != "full":
            if self.attention == "flash" and "score" not in self.dropped:
                extra.append("flash attention")
            if self.fp8:
                extra.append("FP8 caching")
        if self.conv_label:
            extra.append(self.conv_label)
        return pol + (", " + ", ".join(extra) if extra else "")


def _switch_rule(name: str, values):
    return lambda v: getattr(v.conv, name) in values


#: Tags that make a tensor exist only under one kernel or one convention: the view's own (attention kernel,
#: recomputation, and the tags two choices decide), then each switch's ``exists`` (derivations/config/switches.py).
EXISTS = {
    "eager": lambda v: v.attention == "eager",
    # dropout off and the softmax in the activations' dtype: F.dropout(p=0) returns its input (ATen
    # _dropout_impl: "if (p == 0 || !train ...) return input"), so P V saves the softmax output itself
    "dropout_out": lambda v: v.conv.dropout_masks == "kept" or v.conv.softmax_dtype == "fp32",
    "flash": lambda v: v.attention == "flash",
    "mtp_ckpt": lambda v: v.recompute == "full",
    "plain_norm": lambda v: v.conv.norm_storage in ("output", "te") or v.recompute == "full",
    "rope": lambda v: v.recompute != "full",
    "score_recomputed": lambda v: v.recompute != "full" and "score" in v.dropped,
    "sac_saved": lambda v: v.recompute == "selective",  # an op-level policy's saved outputs (op_sac.py)
    **{tag: _switch_rule(name, values) for name, spec in CONVENTION_SWITCHES.items()
       for tag, values in spec.exists.items()},
}

PAPER = View()
def naming_conventions(presets, naming) -> dict:
    """{preset: activation switches} of the presets naming terms; two naming the same are refused."""
    out, seen = {}, {}
    for name in naming:
        p = presets[name]
        conv = Conventions(**{k: v for k, v in p.items() if k in CONVENTION_SWITCHES}).side("activations")
        key = (conv, p.get("attention", "eager"))
        if key in seen:
            raise ValueError(f"conventions presets {seen[key]} and {name} keep the same activations and both name "
                             "terms: one of them must say names_terms = false")
        seen[key] = name
        out[name] = conv
    return out


#: The activation switches of each preset whose name is a term-id suffix (:func:`naming_conventions`).
PRESET_CONVENTIONS = naming_conventions(CONVENTION_PRESETS, NAMING_PRESETS)
