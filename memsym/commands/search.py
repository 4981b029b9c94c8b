"""memsym search: every valid configuration for a GPU count, evaluated in one vectorised pass."""
from __future__ import annotations

from . import COMMANDS, common


def add_parser(sub):
    p = sub.add_parser("search", help=COMMANDS["search"],
                       description="Enumerates every valid configuration for --gpus GPUs: parallel layout (DP, TP, "
                                   "PP, EP, ETP, CP with DP*TP*PP*CP = GPUs, SP = TP), ZeRO stage, recomputation "
                                   "policy, micro-batch b and sequence length s. Invalid layouts (the rules of "
                                   "`memsym estimate`) are rejected before evaluation and counted. Every stage of "
                                   "every configuration is evaluated in one vectorised pass of the lambdified "
                                   "per-device terms; each configuration is judged at its most-loaded stage against "
                                   "the Sec. 6 peak (1 + f_frag) * total + M_buf <= --hbm. Text lists the top "
                                   "--top (default 20); --json and --csv carry every configuration that fits "
                                   "unless --top is given. Bytes are rounded to the nearest byte (exact below "
                                   "2^53); `memsym estimate` gives the exact rational of one configuration.")
    common.add_model_option(p)
    p.add_argument("--gpus", type=common.positive_int, required=True, help="number of GPUs (DP*TP*PP*CP)")
    p.add_argument("--hbm", default="80GiB", help="memory per GPU, e.g. 80GiB (GB and GiB both mean 2^30; "
                                                   "default 80GiB)")
    p.add_argument("--mbs", type=common.int_list, default=(1, 2, 4), metavar="B,B,...",
                   help="micro-batch sizes to try (default 1,2,4: Table 9)")
    p.add_argument("--seq", type=common.int_list, default=(4096,), metavar="S,S,...",
                   help="sequence lengths to try (default 4096: Table 9)")
    p.add_argument("--zero", type=common.int_list, default=(0, 1, 2, 3), metavar="Z,Z,...",
                   help="ZeRO stages to try (default 0,1,2,3)")
    p.add_argument("--recompute", default=None, metavar="POLICY,...",
                   help="recomputation policies to try (default: every policy with an activation term: none, full, ...)")
    p.add_argument("--overheads", choices=["high", "low", "none"], default="high",
                   help="end of the Sec. 6 ranges: high (30%% fragmentation, 2 GiB buffers; default, conservative), "
                        "low (5%%, 0.8 GiB) or none")
    p.add_argument("--sort", choices=["peak", "headroom"], default="peak",
                   help="order: peak (largest first: needs the least memory saving; default) or headroom (most first)")
    p.add_argument("--top", type=common.positive_int, default=None,
                   help="rows to list (text default 20; JSON/CSV default every configuration that fits)")
    p.add_argument("--all-configurations", action="store_true",
                   help="list every fitting configuration (layout x ZeRO x recomputation x micro-batch); by default "
                        "each layout appears once, with its best-ranked fitting configuration")
    p.add_argument("--csv", default=None, metavar="FILE", help="also write the rows as CSV (atomically)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="stacked per-component breakdown of the listed rows (.png or .svg)")
    common.add_json_option(p)
    p.set_defaults(run=run)


def _search(args):
    """(model, hbm, SearchResult, ordered row indices) of a search command line."""
    from derivations import config as cfg
    from derivations import search as S
    model = common.model_from_args(args)
    hbm = cfg.parse_size(args.hbm)
    result = S.configurations(model, args.gpus, hbm, zeros=args.zero, recompute=args.recompute, mbs=args.mbs,
                              seqs=args.seq, overheads=args.overheads)
    idx = S.order(result, sort=args.sort)
    if not args.all_configurations:
        idx = S.first_per_layout(result, idx)
    return model, hbm, result, idx


def data(args) -> dict:
    """What ``search --json`` prints, as Python objects."""
    from derivations import search as S
    model, hbm, result, idx = _search(args)
    full = idx if args.top is None else idx[:args.top]
    return {**_header(model, args, hbm, result), "rows": S.rows(result, full)}


def run(args) -> int:
    from derivations import search as S
    from ..plots import check_output, check_writable, write_atomic
    if args.csv:
        check_writable(args.csv)
    if args.plot:
        check_output(args.plot)
    model, hbm, result, idx = _search(args)
    full = idx if args.top is None else idx[:args.top]
    shown = idx[:args.top or 20]
    if args.csv:
        write_atomic(args.csv, csv_text(S.rows(result, full)))
    if args.plot:
        from ..plots import stacked_breakdown
        rows = S.rows(result, shown[:20])
        stacked_breakdown([(label(r), {k: r[k] for k in ("weights", "gradients", "optimizer", "activations")},
                            r["peak"]) for r in rows], hbm, args.plot,
                          title=f"{model.name} on {args.gpus} GPUs: per-device bytes at the most-loaded stage")
    if args.json:
        write_json(model, args, hbm, result, full)
        return 0
    print(render_text(model, args, hbm, result, shown))
    return 0


def label(r) -> str:
    return (f"DP{r['dp']} TP{r['tp']} PP{r['pp']} EP{r['ep']} ETP{r['etp']} CP{r['cp']} "
            f"Z{r['zero']} {r['recompute']} b{r['mbs']}")


def _header(model, args, hbm, result) -> dict:
    from fractions import Fraction
    from derivations import notation as nt
    enum = result.enumeration
    over = result.overheads
    return {
        "model": model.name, "gpus": args.gpus, "hbm": hbm,
        "overheads": {"end": args.overheads, "f_frag": float(Fraction(over[nt.f_frag])),
                      "M_buf": int(over[nt.M_buf])},
        "counts": {"lattice_candidates": enum.candidates, "valid_layouts": len(enum.layouts),
                   "rejected": dict(sorted(enum.rejected.items())), "considered": result.considered,
                   "fitting": result.fitting},
        "sort": args.sort,
    }


def write_json(model, args, hbm, result, idx) -> None:
    """JSON with one object per row, formatted straight from the columns (tens of thousands of rows)."""
    import json
    import sys
    from derivations import search as S
    head = json.dumps(_header(model, args, hbm, result), indent=2)
    cols = S.columns(result, idx)
    quoted = {p: json.dumps(p) for p in result.policies}
    cols["recompute"] = [quoted[x] for x in cols["recompute"]]
    template = "    {" + ", ".join(f'"{k}": %{"s" if k == "recompute" else "d"}' for k in S.ROW_KEYS) + "}"
    body = ",\n".join(template % vals for vals in zip(*(cols[k] for k in S.ROW_KEYS)))
    sys.stdout.write(head[:-2] + ',\n  "rows": [\n' + body + "\n  ]\n}\n")


def csv_text(rows) -> str:
    import csv
    import io
    from derivations import search as S
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(S.ROW_KEYS), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render_text(model, args, hbm, result, idx) -> str:
    from symbolic.render import fmt_gib, fmt_int
    from derivations import search as S
    h = _header(model, args, hbm, result)
    c = h["counts"]
    rej = ", ".join(f"{k} {fmt_int(v)}" for k, v in c["rejected"].items()) or "none"
    o = h["overheads"]
    n_b, n_s = len(set(args.mbs)), len(set(args.seq))
    lines = [
        f"memsym search: {model.name} on {args.gpus} GPUs, {fmt_gib(hbm)} GiB per device",
        f"layouts: {fmt_int(c['lattice_candidates'])} candidates with DP*TP*PP*CP = {args.gpus}, "
        f"{fmt_int(c['valid_layouts'])} valid (rejected: {rej})",
        f"configurations considered: {fmt_int(c['considered'])} (layouts x {n_b} micro-batch sizes x {n_s} sequence "
        f"lengths x {len(set(args.zero))} ZeRO stages x {len(result.policies)} recomputation policies), every "
        f"pipeline stage evaluated, each judged at its most-loaded stage",
        f"fit: peak = (1 + {o['f_frag']:.2f}) x total + {fmt_gib(o['M_buf'])} GiB <= {fmt_gib(hbm)} GiB "
        f"(Sec. 6, {o['end']} end): {fmt_int(c['fitting'])} configurations fit",
    ]
    if not len(idx):
        lines.append("no configuration fits")
        return "\n".join(lines)
    lines += ["", f"top {len(idx)} by {'peak, largest first' if args.sort == 'peak' else 'headroom, most first'} "
                  f"(GiB; stage = most-loaded stage)"]
    cols = ("DP", "TP", "PP", "EP", "ETP", "CP", "ZeRO", "recompute", "b", "s", "stage", "weights", "grads", "optim",
            "activ", "total", "peak", "headroom")
    widths = (5, 4, 4, 4, 4, 4, 5, 11, 3, 7, 6, 9, 8, 8, 8, 8, 8, 9)
    table = [[r["dp"], r["tp"], r["pp"], r["ep"], r["etp"], r["cp"], r["zero"], r["recompute"], r["mbs"], r["seq"],
              r["stage"]] + [fmt_gib(r[k]) for k in ("weights", "gradients", "optimizer", "activations", "total",
                                                       "peak", "headroom")] for r in S.rows(result, idx)]
    # a column widens with its values (CP=1024, huge bytes) so neighbours never run together
    widths = [max(w, 1 + max(len(str(v[i])) for v in table)) for i, w in enumerate(widths)]
    lines.append("".join(f"{x:>{w}}" for x, w in zip(cols, widths)))
    for vals in table:
        lines.append("".join(f"{x:>{w}}" for x, w in zip(vals, widths)))
    return "\n".join(lines)
