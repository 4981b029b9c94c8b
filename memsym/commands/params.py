"""memsym params: parameters per layer kind, per pipeline stage and in total (Tables 3-4); for released
checkpoints also the activated parameters per token, the MTP modules and the files' tensor elements by dtype."""
from __future__ import annotations

from derivations import families
from derivations.analyses.counts import summary
from derivations.assembly.explain import stage_content
from symbolic.exact import fmt_gib, fmt_int

from . import common


def add_parser(sub):
    common.build(sub, "params", run)


def data(args) -> dict:
    """What ``params --json`` prints."""
    return summary(common.model_from_args(args), args.pp, args.layers_per_stage, args.accounting, args.mtp)[0]


def run(args) -> int:
    model = common.model_from_args(args)
    data, rows = summary(model, args.pp, args.layers_per_stage, args.accounting, args.mtp)
    kinds, extras, total, activated, mtp = (data["per_layer"], data["checkpoint_only"], data["total"],
                                            data["activated"], data.get("mtp"))
    whole = data["layer_kinds"]
    if args.json:
        common.print_json(data)
        return 0
    print(f"memsym params: {model.name}, {args.accounting} accounting, PP={data['pp']}")
    own = "".join(f", {n} {k}" for k, n in whole.items() if k not in ("dense", "moe"))
    print(f"layers: {whole['dense']} dense, {whole['moe']} MoE{own}")
    print(f"\n{'per layer kind':<32}{'params':>20}{'BF16 GiB':>12}")
    for k, v in kinds.items():
        print(f"  {k:<30}{fmt_int(v):>20}{fmt_gib(2 * v):>12}")
    print(f"\n{'stage':<8}{'layers':<14}{'content':<34}{'params':>20}{'BF16 GiB':>12}")
    for c, p, _ in rows:
        content = stage_content(c, model.family)
        print(f"{c.index:<8}{c.label.replace('layers ', '').replace('layer ', ''):<14}{content:<34}"
              f"{fmt_int(p):>20}{fmt_gib(2 * p):>12}")
    if extras:
        print("  checkpoint-only tensors (not counted by the paper), included above:")
        # the family's own checkpoint rows by their labels (DeepSeek-V4's learned routers' biases), else DeepSeek's
        own = {key: label for key, label, _, _, at in families.get(model.family).additions if at == "checkpoint"}
        for k, v in extras.items():
            print(f"    {own.get(k, EXTRA_LABELS.get(k, k)):<52}{fmt_int(v):>20}")
    print(f"{'total':<56}{fmt_int(total):>20}{fmt_gib(2 * total):>12}  {fmt_b(total)}")
    print("\n" + render_activated(model, activated))
    if mtp is not None:
        print("\n" + render_mtp(model, mtp, total))
    if "checkpoint_files" in data:
        print("\n" + render_files(model, data["checkpoint_files"]))
    return 0


EXTRA_LABELS = {"final_norm": "final RMSNorm (model.norm), h",
                "router_bias": "noaux_tc routing bias, N per MoE layer"}


def fmt_b(x) -> str:
    """Parameters in billions (1e9), as model cards print them."""
    return f"{float(x) / 1e9:,.2f}B"


def _row(label: str, n) -> str:
    """One line of the parameter counts below the tables: label, count, billions."""
    return f"  {label:<54}{fmt_int(n):>20}  {fmt_b(n)}"


def render_activated(model, a) -> str:
    routed = (f"N_r={model.N_r} routed + N_s={model.N_s} shared experts per MoE layer, everything dense"
              if "per_moe_layer" in a else "every layer dense: every parameter")
    return "\n".join([f"activated parameters per token ({routed}; {a['term']})"] + [_row(label, a[k]) for k, label in (
        ("with_embedding_and_head", "with embedding and head"),
        ("without_embedding", "without the embedding (a lookup, not a product)"),
        ("without_embedding_and_head", "without embedding and head (layers only)"))])


MTP_LABELS = {"block": "MoE transformer block", "router_bias": "its routing bias (noaux_tc)",
              "eh_proj": "eh_proj, h x 2h", "enorm": "enorm (RMSNorm), h", "hnorm": "hnorm (RMSNorm), h",
              "head_norm": "shared_head.norm (RMSNorm), h"}


def render_mtp(model, m, total) -> str:
    if not m["modules"]:
        return (f"MTP modules: {model.name} has none (num_nextn_predict_layers = 0 or absent); "
                f"total with MTP = total")
    lines = [f"MTP modules (D={m['modules']}; not counted by the paper; embedding and head shared with the main "
             f"model, not counted again; {m['term']})"]
    lines += [f"  {'per module: ' + MTP_LABELS.get(k, k):<54}{fmt_int(v):>20}" for k, v in m["per_module"].items()]
    lines += [_row("MTP modules, unique weights", m["params"]), _row("main model + MTP", total + m["params"]),
              _row("MTP activated per token (no embedding, no head)", m["activated"])]
    return "\n".join(lines)


def render_files(model, f) -> str:
    fp8 = (f"FP8 {model.fp8_block[0]}x{model.fp8_block[1]} block-quantised release: block projections F8_E4M3, "
           f"their weight_scale_inv and the routing bias F32, the rest BF16"
           if model.fp8_block else "every tensor counted as BF16 (no FP8 quantization_config)")
    lines = [f"tensor elements of the checkpoint files (what a model page sums; {fp8})"]
    for k, label in (("main", "main model (as above)"), ("mtp", f"MTP modules, unique (D={model.mtp_layers})"),
                     ("mtp_embedding_head_copies", "MTP modules' own copies of the embedding and head"),
                     ("fp8_scales", "FP8 scale tensors (weight_scale_inv; not weights)"), ("total", "total")):
        if not f[k] and k not in ("main", "total"):
            continue
        lines.append(_row(label, f[k]))
    lines.append("  by dtype: " + ", ".join(f"{k} {fmt_int(v)}" for k, v in f["by_dtype"].items()))
    return "\n".join(lines)
