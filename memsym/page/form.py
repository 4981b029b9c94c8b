"""The page's controls as data, one per option of ``memsym estimate`` it offers (and a pasted config.json):
:func:`controls` renders form.html.j2, :func:`behaviour` is what ui.js reads of them."""
from __future__ import annotations

import re
from typing import Dict, List

from derivations import config as cfg

#: The --*-dtype options: (dest, the byte symbols each sets, what they are).
DTYPES = (("weight_dtype", ("B_w",), "weights"), ("grad_dtype", ("B_g",), "gradients"),
          ("master_dtype", ("B_m",), "the optimizer's master weights"),
          ("optimizer_dtype", ("B_1", "B_2"), "both Adam moments"), ("act_dtype", ("B_a",), "activations"))
#: The layout's degrees and what each splits.
LAYOUT = (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("ep", "expert"), ("etp", "expert tensor"),
          ("cp", "context"))
#: The conventions presets by the framework each describes (the --conventions choices), as a practitioner names it.
FRAMEWORKS = {"paper": "the paper (Zhang & Su)", "megatron": "Megatron-LM's estimator",
              "modelzoo": "Megatron-MoE-ModelZoo", "transformers": "Hugging Face transformers",
              "mcore": "Megatron-Core (local spec)", "mcore-te": "Megatron-Core with Transformer Engine"}
#: The order the page reads the typed fields in (the first refusal is the one the command line gives for these
#: options in this order): the GPU count, the layout, then the training, the precision and the assumptions.
READ = ("gpus", *(k for k, _ in LAYOUT), "sp", "layers_per_stage", "stage", "zero", "recompute", "attention", "mbs",
        "seq", "global_batch", "imbalance", "schedule", "microbatches", "vpp", "virtual_layers",
        *(d for d, _, _ in DTYPES), "fp8_activations", "offload_activations", "linear_recipe", "quantized_param_gather",
        *cfg.CONVENTION_SWITCHES, "bytes_per_param",
        "mtp")

#: The fields a refusal of the printed checks concerns, by its ConfigError's constraint or the constraint's first
#: word (the first field is shown the message unless the field last changed is among them); ``limit.<dest>``: that
#: option's; a family's divisibility rule: its degree's (memsym/page/data.py divides).
REFUSED = {"gpus": ["gpus", "dp", "tp", "pp", "cp"], "sp": ["sp", "tp"], "no-experts": ["ep", "etp"],
           "pp-layers": ["pp"], "cp-divides-seq": ["cp", "seq"],
           "sp-divides-seq": ["seq", "sp", "tp", "cp"], "edp-integer": ["dp", "tp", "ep", "etp", "cp"],
           "layers-per-stage": ["layers_per_stage", "pp"], "dualpipe-pp": ["pp", "schedule"],
           "dualpipe-microbatches": ["microbatches", "schedule"],
           "mtp": ["mtp", "mtp_activations", "rank", "conventions"],
           "global-batch": ["global_batch", "microbatches", "dp", "mbs"], "schedule": ["microbatches", "schedule"],
           "vpp": ["vpp", "schedule"], "virtual-layers": ["virtual_layers", "schedule"],
           "fp8-activations": ["fp8_activations"], "recompute-ops": ["recompute"],
           "hf-config": ["config", "conventions", "head_state", "dropout_masks"],
           **{k: [k.replace("-", "_"), "conventions", "zero", "fp8_activations", "recompute"]
              for k in ("offload-activations", "linear-recipe", "quantized-param-gather")}}


def _text(dest, words, placeholder, read="positive_int", flag=None, mode="numeric"):
    """A typed field: ``read`` names its argparse type (inputs.js), ``mode`` the keyboard it wants (inputmode)."""
    return {"dest": dest, "kind": "text", "words": words, "flag": flag or "--" + dest.replace("_", "-"),
            "placeholder": placeholder, "read": read, "mode": mode}


def _select(dest, words, choices, default, read="choice", flag=None, help=None):
    """A choice: [value, text] pairs after the empty one (not typed) that says the default."""
    return {"dest": dest, "kind": "select", "words": words, "flag": flag or "--" + dest.replace("_", "-"),
            "choices": [["", default]] + [[str(c), str(c)] for c in choices], "read": read, "help": help}


def _flag(dest, words, help):
    return {"dest": dest, "kind": "flag", "words": words, "flag": "--" + dest.replace("_", "-"), "help": help,
            "read": "flag"}


def controls(data: Dict) -> Dict[str, List[Dict]]:
    """{section of the form: [control, ...]} of a page's data (memsym.page.data.generate), in the form's order."""
    O = data["options"]
    T, L = O["training"], O["layout"]
    names = list(O["presets"]) + list(data["released"]) + list(data["models"])
    paste = "deepseek" in data["families"] and bool(O["presets"])  # the page reads DeepSeek's fields
    model = {"dest": "model", "kind": "model", "flag": "--model", "choices": [[n, n] for n in names]
             + ([["config", "pasted config.json (below)"]] if paste else []),
             "words": "model: a preset, a released model or a pasted config.json" if paste
             else "model (as memsym page --model read it)"}
    # the pasted config.json: offered where the page reads DeepSeek's fields (the URL names it on every page)
    config = {"dest": "config", "kind": "config", "flag": "--model config.json", "offered": paste,
              "words": "pasted Hugging Face config.json (read as data)"}
    conventions = {"dest": "conventions", "kind": "select", "flag": "--conventions",
                   "words": "framework: whose memory accounting", "choices": [["", "the paper's (no preset)"]]
                   + [[k, f"{k}: {FRAMEWORKS.get(k, k)}"] for k in O["convention_presets"]]}
    gpu = {"dest": "gpu", "kind": "gpu", "flag": "--gpu", "words": "GPU (memory a training job can use)",
           "choices": [[g["id"], f"{g['name']} ({g['capacity']})"] for g in data["gpus"]]}
    setup = [model, config, conventions, gpu,
             _text("gpus", "GPUs in the job (sets DP = GPUs / (TP PP CP))", "DP TP PP CP")]
    recompute = _select("recompute", "recomputation", O["recompute"], T["recompute"], read="recompute")
    recompute["kind"] = "recompute"
    return {
        "setup": setup,
        "layout": [_text(k, f"{k.upper()}, {words}", str(L[k])) for k, words in LAYOUT],
        "layout_more": [_text("sp", "SP: TP or 1", "default TP"),
                        _text("layers_per_stage", "layers per stage N,N,...", "default: the paper's split",
                              read="int_list"),
                        _text("stage", "pipeline stage shown", "1; with a schedule the most-loaded",
                              read="nonnegative_int")],
        "training": [_text("mbs", "micro-batch b", str(T["mbs"])), _text("seq", "sequence s", str(T["seq"])),
                     _text("global_batch", "global batch G", "none"),
                     _select("zero", "ZeRO stage", O["zero_names"], f"{T['zero']} ({O['zero_names'][str(T['zero'])]})",
                             read="int")],
        "recompute": [recompute],
        "ops": [dict(_flag(f"op-{op}", f"custom: {op}", what), read=None) for op, what in O["recompute_ops"].items()],
        "schedule": [_select("attention", "attention kernel", O["attention"], T["attention"]),
                     _text("imbalance", "routing imbalance F >= 1", T["imbalance"], read="imbalance"),
                     _select("schedule", "pipeline schedule", O["schedules"], "none: one micro-batch"),
                     _text("microbatches", "micro-batches m", "fill the pipeline"),
                     _text("vpp", "virtual stages V (interleaved)", "2"),
                     _text("virtual_layers", "layers of the PP x V virtual stages (Megatron's layout)",
                           "V equal chunks per stage", read="layer_counts"),
                     _select("recipe", "recipe", O["recipes"], "none")],
        "caching": [_flag("fp8_activations", "cache activations in FP8 (--fp8-activations)",
                          "the DeepSeek-V3 report's FP8 / E5M6 activations")]
        # Megatron-Core's fine-grained activation offloading (derivations/assembly/offload.py), on DeepSeek's tensors
        + ([_text("offload_activations", "offload to host memory: modules (needs mcore)",
                  ",".join(data["offload"]["modules"]), read="offload_modules", mode="text")]
           if data.get("offload") else []),
        "precision": [_select(dest, f"{what} ({', '.join(syms)})", O["dtypes"], "default", read="dtype",
                              flag="--" + dest.replace("_", "-", 1)) for dest, syms, what in DTYPES]
        + [_select("bytes_per_param", "bytes per parameter convention", O["bytes_conventions"], "paper")]
        # Transformer Engine's quantized linear layers (derivations/assembly/quantized.py), where DeepSeek's are read
        + ([_select("linear_recipe", "linear layers in TE's recipe (needs mcore-te)", data["linear_recipes"],
                    "none: BF16"),
            _flag("quantized_param_gather", "the linear weights quantized (--quantized-param-gather)",
                  "Megatron's --fp8-param-gather: no BF16 copy of them")] if data.get("linear_recipes") else []),
        "assumptions": [_select(name, re.split(r"[:;(]", s["help"])[0][:60], s["values"], s["values"][0],
                                flag=s["option"], help=s["help"]) for name, s in O["switches"].items()]
        + [_flag("mtp", "count the MTP layers in Megatron's shard (--mtp)", "needs --rank megatron")],
    }


def behaviour(form: Dict[str, List[Dict]]) -> Dict:
    """What the page's script reads of the form: {state: [[the URL's key (the flag without --), dest, kind], ...] in
    the form's order, read: [[dest, argparse type], ...] in :data:`READ`'s order, dtypes: [[dest, symbols], ...]}."""
    rows = [c for section in form.values() for c in section if c.get("read", "") is not None]
    by_dest = {c["dest"]: c for c in rows}
    state = [["config", "config", "text"] if c["dest"] == "config" else [c["flag"][2:], c["dest"], c["kind"]]
             for c in rows]
    return {"state": state, "read": [[d, by_dest[d]["read"]] for d in READ if d in by_dest],
            "dtypes": [[dest, list(syms)] for dest, syms, _ in DTYPES], "refused": REFUSED}
