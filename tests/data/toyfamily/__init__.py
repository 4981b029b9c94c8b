"""A toy family, Llama-style: grouped-query attention (n_kv key-value heads shared by n_h query heads) and a dense
SwiGLU FFN in every layer, no experts.  It is a family as derivations/families/README.md describes one, written
outside memsym: this folder alone (its declaration here; config.py, parameters.py, activations.py, report.py), made
known with one line (tests/test_families.py)::

    generate.install(families.register(importlib.import_module("toyfamily").FAMILY))
"""
from derivations.families import Divides, Family, Kind


class Toy(Family):
    """GQA + SwiGLU; its hooks are the defaults (the modules of this folder)."""

    name = "toy"
    title = "GQA + SwiGLU"
    short = "GQA + SwiGLU"
    model_types = ("toy_gqa",)
    dimensions = (("hidden_size", "h", "hidden size h"), ("intermediate_size", "h_F", "FFN width h_F"),
                  ("num_hidden_layers", "l", "layers l"), ("num_attention_heads", "n_h", "heads n_h"),
                  ("num_key_value_heads", "n_kv", "key-value heads n_kv"), ("head_dim", "d_h", "head dimension d_h"),
                  ("vocab_size", "v", "vocabulary v"))
    kinds = ("gqa", "dense", "head")
    flags = ("tied",)
    attention_label = "GQA"
    sections = ("parameters", "static", "zero", "activations", "overheads")
    layer = ("gqa", "dense")
    layer_what = "transformer layer (GQA + dense FFN)"
    layer_terms = (Kind("gqa", "act.gqa.layer", "one GQA layer", "toy",
                        full=("only the layer input is kept", "only the layer input is kept"), label="GQA"),
                   Kind("dense", "act.dense.layer", "one dense FFN sublayer", "toy",
                        full=("only the layer input is kept", "nothing kept"), label="dense FFN", per="dense"),
                   Kind("head", "act.head", "final norm, head and loss", "toy", label="head and loss", per="last"))
    divides = (Divides("tp-divides-heads", "n_h", "tp", "TP={TP} must divide n_h={n_h}"),
               Divides("tp-divides-kv-heads", "n_kv", "tp", "TP={TP} must divide n_kv={n_kv} ({name})"),
               Divides("tp-divides-ffn", "h_F", "tp", "TP={TP} must divide h_F={h_F}"))


FAMILY = Toy()
