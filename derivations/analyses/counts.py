"""Parameter counts of a model for ``memsym params``: per layer kind, per pipeline stage and in
total (Tables 3-4), the checkpoint's extra tensors, activated parameters per token and the
multi-token-prediction modules, all exact from the ``params.*`` terms (their generated evaluators,
derivations/evaluate.py: no sympy)."""
from __future__ import annotations

from fractions import Fraction

from derivations import config as cfg
from derivations import evaluate as ev
from derivations.assembly.device import stage_params
from derivations import families


def summary(model: cfg.ModelSpec, pp=None, layers_per_stage=None, accounting: str = "paper", mtp: bool = False):
    """(the JSON of ``memsym params``, the stage rows [(composition, params, parts)]).
    ``pp`` None: min(16, l) stages (or as many as ``layers_per_stage`` lists)."""
    if pp is None:
        pp = min(16, model.l) if layers_per_stage is None else len(layers_per_stage)
    layout = cfg.Layout(pp=pp, layers_per_stage=layers_per_stage)
    if pp > model.l:
        raise cfg.ConfigError("pp-layers", f"PP={pp} is larger than the {model.l} layers of {model.name}")
    rows, total = stage_params(model, layout, accounting)
    fam = families.get(model.family)
    base = ev.Terms(model.structure, ev.derived(cfg.named(model), fam.name), fam.name)
    kinds = {kind: Fraction(base.term(tid)) for kind, tid in (
        ("dense_layer", "params.layer.dense"), ("moe_layer", "params.layer.moe"),
        (fam.attention, "params." + fam.attention), ("norm", "params.norm"), ("embedding", "params.embedding"),
        ("head", "params.head")) if tid in base and (kind != "dense_layer" or "dense" in fam.kinds)}
    # the family's own terms beside them (DeepSeek-V4's hyper-connections, compressors, hyper-connection head)
    kinds.update({key: Fraction(base.term(tid)) for key, _, tid in fam.layer_extra})
    kinds.update({key: Fraction(base.term(tid)) for key, _, _, tid, at in fam.additions
                  if at == "stage" and tid in base})
    # a count is reported where the model's terms read it (DeepSeek's L_I: a structure with DSA's params.indexer)
    counted = {c for _, _, c, tid, _ in fam.additions if tid in base}
    whole = cfg.whole_model(model)
    terms = ev.Terms(model.structure, ev.derived(cfg.named(model, None, None, whole), fam.name), fam.name)
    extras = {}
    if accounting == "checkpoint":
        extras = {key: Fraction(v) for key, _, v in terms.parts("params.stage.checkpoint") if key != "paper"}
    data = {
        "model": model.name, "accounting": accounting, "pp": pp,
        "layer_kinds": {"dense": whole.dense, "moe": whole.moe,
                        **{feature: dict(whole.extra)[sym] for sym, feature, _ in fam.counts if sym in counted}},
        "per_layer": kinds,
        "stages": [{"stage": c.index, "layers": [c.layers.start, c.layers.stop - 1], "dense_layers": c.dense,
                    "moe_layers": c.moe, "embedding": c.embedding, "head": c.head, "params": p,
                    "bf16_bytes": p * 2, "parts": parts} for c, p, parts in rows],
        "checkpoint_only": extras,
        "total": total,
        "activated": activated_params(terms, accounting),
    }
    if mtp and "mtp" not in fam.kinds:
        if getattr(model, "mtp_layers", 0):
            raise cfg.ConfigError("mtp", f"--mtp: {model.name}'s {model.mtp_layers} multi-token-prediction module(s) "
                                         f"are not modelled for {fam.title} (transformers builds none)")
        raise cfg.ConfigError("mtp", f"--mtp: {model.name} ({fam.title}) has no multi-token-prediction modules")
    if mtp:
        data["mtp"] = mtp_params(model, terms)
        data["total_with_mtp"] = total + data["mtp"]["params"]
    if accounting == "checkpoint" and fam.checkpoint:
        data["checkpoint_files"] = fam.checkpoint_files(model)
    return data, rows


def activated_params(terms, accounting: str) -> dict:
    """Parameters one token passes through (top-k routed + shared experts + everything dense): with the embedding
    and head, without the embedding (a lookup), without both."""
    tid = "params.activated" if accounting == "paper" else "params.activated.checkpoint"
    total = Fraction(terms.term(tid))
    paper = {key: Fraction(v) for key, _, v in terms.parts("params.activated")}
    emb, head = paper["embedding"], paper["head"]
    out = {"with_embedding_and_head": total, "without_embedding": total - emb,
           "without_embedding_and_head": total - emb - head}
    if "params.activated.layer.moe" in terms:  # a family with experts
        out["per_moe_layer"] = Fraction(terms.term("params.activated.layer.moe"))
    out["term"] = tid
    return out


def mtp_params(model, terms) -> dict:
    """The D multi-token-prediction modules (embedding and head shared, not counted again)."""
    return {"modules": model.mtp_layers, "params": Fraction(terms.term("params.mtp")),
            "per_module": {key: Fraction(v) for key, _, v in terms.parts("params.mtp.module")},
            "activated": Fraction(terms.term("params.mtp.activated")),
            "shared_not_counted": ["embedding", "head"], "term": "params.mtp"}
