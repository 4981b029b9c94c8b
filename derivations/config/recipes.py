"""Recipes (``--recipe``): named layouts and training choices as data, each with its source and the assumptions it
had to make where the source is silent (``memsym estimate --recipe NAME`` lists those that still hold)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from derivations import config as cfg


@dataclass(frozen=True)
class Recipe:
    """options: {option dest: value} as the command line parses it; assumptions:
    ((dest or '', text), ...): an assumption tied to an option is dropped when that option
    is typed; device: (name, bytes of memory) to print the peak against, if any."""

    name: str
    description: str
    provenance: str
    options: Dict[str, object]
    assumptions: Tuple[Tuple[str, str], ...] = ()
    device: Optional[Tuple[str, int]] = None

    def assumptions_for(self, typed: Iterable[str] = ()) -> List[str]:
        typed = set(typed)
        return [f"recipe {self.name}: {text}" for dest, text in self.assumptions if not dest or dest not in typed]

    # -- the Python API: the recipe as a configuration ------------------------------
    def model(self) -> cfg.ModelSpec:
        return cfg.load_model(self.options["model"])

    def layout(self) -> cfg.Layout:
        o = self.options
        return cfg.Layout(dp=o["dp"], tp=o["tp"], pp=o["pp"], ep=o["ep"], etp=o["etp"], cp=o["cp"], sp=o["sp"],
                          layers_per_stage=o["layers_per_stage"])

    def training(self) -> cfg.Training:
        o = self.options
        t = cfg.Training(mbs=o["mbs"], seq=o["seq"], zero=o["zero"], recompute=o["recompute"][0],
                         recompute_ops=o["recompute"][1], attention=o["attention"], fp8=o["fp8_activations"],
                         imbalance=o["imbalance"], schedule=o["schedule"], microbatches=o["microbatches"],
                         vpp=o["vpp"])
        return t.with_bytes(B_w=o["weight_dtype"], B_g=o["grad_dtype"], B_m=o["master_dtype"],
                            B_1=o["optimizer_dtype"], B_2=o["optimizer_dtype"], B_a=o["act_dtype"])


def _paper_options() -> Dict[str, object]:
    """The command-line options of the paper's configuration: the Layout and Training defaults."""
    lay, tr = cfg.Layout(), cfg.Training()
    byts = dict(tr.bytes)
    return dict(model=cfg.DEFAULT_MODEL, dp=lay.dp, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp, cp=lay.cp,
                sp=lay.sp, layers_per_stage=lay.layers_per_stage, zero=tr.zero,
                recompute=(tr.recompute, tuple(tr.recompute_ops)), attention=tr.attention, mbs=tr.mbs, seq=tr.seq,
                imbalance=tr.imbalance, schedule=tr.schedule, microbatches=tr.microbatches, vpp=tr.vpp,
                weight_dtype=byts["B_w"], grad_dtype=byts["B_g"], master_dtype=byts["B_m"],
                optimizer_dtype=byts["B_1"], act_dtype=byts["B_a"], fp8_activations=tr.fp8)


_PAPER_OPTIONS = _paper_options()

#: DeepSeek-V3's batch (report Sec. 4.2: "keeps 15360 in the remaining training"), in sequences.
DSV3_BATCH = 15360
DSV3_GPUS = 2048
_DSV3_DP = DSV3_GPUS // 16          # PP16, no TP, no CP: 128 data-parallel replicas
_DSV3_M = DSV3_BATCH // (_DSV3_DP * 1)  # micro-batches per step at b = 1

RECIPES: Dict[str, Recipe] = {
    "paper": Recipe(
        "paper", "the paper's settings (Tables 5, 7 and 9): the memsym defaults",
        "Zhang & Su, arXiv 2502.07846, Tables 5, 7, 9", dict(_PAPER_OPTIONS),
        (("schedule", "one micro-batch's activations of the stage (Table 10's view; no pipeline schedule)"),
         ("attention", "unfused attention keeping the 5 b n_h s^2 / TP score tensors (Sec. 5.1)"),
         ("recompute", "dropout masks kept (Sec. 5.1); no recomputation (Table 9 also gives full)"),
         ("imbalance", "balanced routing, E_token = b s N_r / N (Table 9)"))),
    "deepseek-v3": Recipe(
        "deepseek-v3", "DeepSeek-V3's own training (technical report, arXiv 2412.19437)",
        "DeepSeek-V3 report Sec. 3.1-3.3, 4.2, Table 2",
        dict(_PAPER_OPTIONS, dp=_DSV3_DP, tp=1, pp=16, ep=64, etp=1, zero=1,
             recompute=cfg.parse_recompute("custom:norm,mla_up,mask,swiglu"), attention="flash",
             schedule="dualpipe", microbatches=_DSV3_M, weight_dtype=2, grad_dtype=4, master_dtype=4,
             optimizer_dtype=2, act_dtype=2, fp8_activations=True),
        (("mbs", "micro-batch size b = 1 sequence of 4096 tokens (the report does not state it)"),
         ("microbatches", f"m = {_DSV3_M} micro-batches per step: the report's batch of {DSV3_BATCH} sequences "
                          f"(Sec. 4.2) over DP = {DSV3_GPUS} GPUs / PP16 = {_DSV3_DP} replicas at b = 1"),
         ("layers_per_stage", "the 61 layers split as the paper splits them (4 per stage, layer 60 alone on "
                              "stage 15); the report does not give its split"),
         ("attention", "fused (flash) attention: the report does not name its kernel, and the eager b n_h s^2 "
                       "tensors (about 20 GiB per layer at s = 4096 without TP) could not fit"),
         ("recompute", "recomputes norm and mla_up (Sec. 3.2.3) and the SwiGLU outputs (Sec. 3.3: 'cache the "
                       "inputs of the SwiGLU operator and recompute its output'); no dropout, so no masks kept "
                       "(the released config has attention_dropout 0.0)"),
         ("fp8_activations", "FP8 caching of the MoE up-projection and SwiGLU inputs (1 B) and of the attention "
                             "output in E5M6 counted as 12 bits packed (1.5 B); per-tile FP32 scales not counted"),
         ("weight_dtype", "a BF16 working copy of the weights (2 B) beside the FP32 master copy in the optimizer"),
         ("imbalance", "balanced routing F = 1 (auxiliary-loss-free balancing; try --imbalance)"),
         ("", "routed tokens per device as the paper counts them (b s N_r / EP; digest sec. 10)"),
         ("", "the MTP module (D = 1) is not counted, as in the paper; the parameter EMA is in CPU memory "
              "(Sec. 3.2.3)")),
        device=("H800", 80 * cfg.GiB)),
}


def get(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise cfg.ConfigError("recipe", f"unknown recipe {name!r}: use one of {', '.join(RECIPES)}") from None
