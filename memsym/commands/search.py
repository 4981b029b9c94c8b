"""memsym search: every valid configuration for a GPU count, every device evaluated at once by estimate's printed
assembly over numpy arrays."""
from __future__ import annotations

from . import common
from .timeopts import efficiency_text, seconds, time_options
import io
import json
import os
import sys
from dataclasses import replace

from derivations import config as cfg
from derivations.config import resolve as R
from derivations.config.defaults import DEFAULT_GPU
from fractions import Fraction
from symbolic.exact import count, fmt_gib, fmt_int


def add_parser(sub):
    common.build(sub, "search", run)


def _apply_recipe(args) -> None:
    """--recipe, as the command line resolved it (memsym/commands/common.py: finish; typed options win): the
    recipe's one sequence length, micro-batch size, ZeRO stage and recompute policy become the lists searched (a
    custom policy's operators in ``args.recompute_ops``, read by :func:`_options`)."""
    if not args.recipe:
        return
    for k in ("seq", "mbs", "zero"):
        if not isinstance(getattr(args, k), (tuple, list)):
            setattr(args, k, (getattr(args, k),))
    if isinstance(args.recompute, tuple):  # the recipe's (policy, operators)
        args.recompute, args.recompute_ops = args.recompute


def _search(args, rows=None):
    """(model, hbm, SearchResult, ordered row indices) of a search command line: the first ``rows``
    of them (None: all)."""
    from derivations.analyses import search as S
    from derivations.config.frameworks import framework
    if args.memory:  # the terms' total first (overheads none): a kind's bytes are never below it
        if "overheads" in common.explicit(args):
            raise cfg.ConfigError("memory", f"--overheads {args.overheads} sets the Sec. 6 ranges, which --memory "
                                            f"{args.memory} replaces: give one of them")
        args.overheads, rows = "none", rows or 20
    _apply_recipe(args)
    rank = R.conventions_of(vars(args)).rank
    if rank in cfg.RANK_ZERO:  # FSDP shards parameters, gradients and optimizer states: its ZeRO stage only
        if "zero" in common.explicit(args) and set(args.zero) != {cfg.RANK_ZERO[rank]}:
            raise cfg.ConfigError("zero", f"--rank {rank} shards the parameters, gradients and optimizer states (ZeRO "
                                          f"{cfg.RANK_ZERO[rank]}): --zero {','.join(map(str, args.zero))} "
                                          f"contradicts it")
        args.zero = (cfg.RANK_ZERO[rank],)
    fw = framework(args.framework, args.conventions)
    if fw is not None and args.schedule is not None and args.schedule not in fw.schedules:
        raise cfg.ConfigError("framework", f"--schedule {args.schedule}: {fw.refusal(0, 2, args.schedule)}")
    if args.schedule is not None and args.global_batch is None and args.microbatches is None:
        raise cfg.ConfigError("microbatches", f"search --schedule {args.schedule} judges and times every configuration "
                                              f"over a step of m micro-batches: give --global-batch G (m = G / (DP "
                                              f"mbs)) or --microbatches M")
    model = common.model_from_args(args)
    hbm, _ = common.budget_from_args(args, default_gpu=DEFAULT_GPU)
    result = S.configurations(model, args.gpus, hbm, zeros=args.zero, recompute=args.recompute, mbs=args.mbs,
                              seqs=args.seq, overheads=args.overheads, schedule=args.schedule,
                              microbatches=args.microbatches, vpp=args.vpp, global_batch=args.global_batch,
                              gpus_per_node=args.gpus_per_node or 8, attention=args.attention,
                              options=_options(args))
    _framework(fw, result)
    if model.family == "deepseek":  # the step-time model covers the DeepSeek family
        S.add_time(result, model, result.training, vpp=args.vpp,
                   lazy=bool(rows) and args.sort == "time" and not args.memory, **time_options(args))
    elif args.sort == "time":
        args.sort = "bubble"
    if args.memory:
        return model, hbm, result, _judged(args, model, hbm, result, rows)
    return model, hbm, result, S.ranked(result, sort=args.sort, per_layout=not args.all_configurations, top=rows)


def _judged(args, model, hbm, result, top):
    """--memory KIND: the first ``top`` ranked rows whose KIND bytes fit ``hbm``, each configuration judged at its
    most-loaded stage by what ``memsym estimate --memory KIND`` runs (common.memory_of), in rank order and only until
    ``top`` fit (derivations/analyses/ranking.py ranked_judged); the judged bytes kept in ``result.judged``."""
    import numpy as np

    from derivations.analyses import search as S
    from derivations.assembly.device import estimate

    def judge(i):  # --cuda-graphs: the graphs' capture and pool, as estimate counts them
        layout, training, stage = S.configuration(result, S.rows(result, np.array([i]))[0])
        training = replace(training, cuda_graphs=args.cuda_graphs or (), graph_warmup=args.cuda_graph_warmup_steps)
        return common.memory_of(args, estimate(model, layout, training, stage))
    passed = result.fitting
    idx, got = S.ranked_judged(result, judge, args.memory, hbm, sort=args.sort,
                               per_layout=not args.all_configurations, top=top)
    gpu = common.budget_from_args(args, default_gpu=DEFAULT_GPU)[1]  # the capacity judged: --hbm, --gpu or h800's
    result.judged = {"kind": args.memory, "capacity": hbm, "capacity_of": gpu.name if gpu else "--hbm",
                     "terms_fitting": passed, "judged": len(got),
                     "over_capacity": sum(m[args.memory] > hbm for m in got.values()), "bytes": got,
                     **({"cuda_graphs": list(args.cuda_graphs)} if args.cuda_graphs else {})}
    return idx


def _framework(fw, result) -> None:
    """--framework (or the conventions' framework): a configuration the framework does not run (its ZeRO stage at
    its PP) is not listed, counted among the invalid ones (a schedule it does not run is refused before)."""
    import numpy as np
    if fw is None:
        return
    col = result.columns
    allowed = np.where(col["pp"] > 1, np.isin(col["zero"], fw.zero_pp), np.isin(col["zero"], fw.zero))
    dropped = int((col["fits"] & ~allowed).sum())
    col["fits"] = col["fits"] & allowed
    if dropped:
        result.invalid[f"fitting, but not run by {fw.name}"] += dropped


def _options(args):
    """A Training of what every configuration runs beside the searched choices (the conventions, offloading, the
    linear recipe, Megatron's virtual stages, the routing skew F, and a recipe's custom recomputation operators, FP8
    activations and bytes per element), or None when that is the paper's."""
    if args.capacity_factor or args.pad_to_capacity:  # a bound per layout, where search judges one F for all
        raise cfg.ConfigError("capacity-factor", "search judges every configuration at one stated skew "
                                                 "(--imbalance F); --capacity-factor bounds F per layout (its b, s, "
                                                 "SP, CP and EP): give it to memsym estimate or fit")
    byts = {sym: getattr(args, dest) for dest, syms in R.DTYPE_OPTIONS if getattr(args, dest, None) is not None
            for sym in syms}
    opts = cfg.Training(conventions=R.conventions_of(vars(args)), offload=args.offload_activations or (),
                        linear_recipe=args.linear_recipe, quantized_params=args.quantized_param_gather,
                        virtual_layers=args.virtual_layers, recompute_ops=getattr(args, "recompute_ops", ()),
                        fp8=bool(getattr(args, "fp8_activations", False)),
                        imbalance=1 if args.imbalance == 1 else args.imbalance).with_bytes(**byts)
    return opts if opts != cfg.Training() else None


def data(args) -> dict:
    """What ``search --json`` prints, as Python objects."""
    from derivations.analyses import search as S
    model, hbm, result, full = _search(args, args.top)
    return {**_header(model, args, hbm, result), "rows": S.rows(result, full)}


#: Set for a ``memsym search`` process only, before numpy loads (:func:`run`), unless the user set their own: one
#: OpenBLAS thread (the search is element-wise; a thread per core cost ~0.05 s of its start on two cores).
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def run(args) -> int:
    if not any(k in os.environ for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ.update(BLAS_THREADS)  # before numpy loads: see BLAS_THREADS
    from derivations.analyses import search as S
    # every row only where every row is written (JSON, CSV without --top); text lists --top or 20
    model, hbm, result, idx = _search(args, args.top or (None if args.json or args.csv else 20))
    full = idx if args.top is None else idx[:args.top]
    shown = idx[:args.top or 20]
    if args.csv:
        from symbolic.files import write_atomic  # (the folder checked before any work: cli.py)
        write_atomic(args.csv, csv_text(S.rows(result, full)))
    if args.plot:
        from ..plots import stacked_breakdown
        stacked_breakdown([(f"DP{r['dp']} TP{r['tp']} PP{r['pp']} EP{r['ep']} ETP{r['etp']} CP{r['cp']} "
                            f"Z{r['zero']} {r['recompute']} b{r['mbs']}",
                            {k: r[k] for k in ("weights", "gradients", "optimizer", "activations")}, r["peak"])
                           for r in S.rows(result, shown[:20])], hbm, args.plot,
                          title=f"{model.name} on {args.gpus} GPUs: per-device bytes at the most-loaded stage")
    if args.json:
        write_json(model, args, hbm, result, full)
        return 0
    print(render_text(model, args, hbm, result, shown))
    common.print_defaults(args)
    return 0


def _header(model, args, hbm, result) -> dict:
    enum = result.enumeration
    over = result.overheads  # by name: no sympy
    gpu = common.budget_from_args(args, default_gpu=DEFAULT_GPU)[1]
    return {
        "model": model.name, "gpus": args.gpus, "hbm": hbm, "capacity_of": gpu.name if gpu else "--hbm",
        "overheads": {"end": args.overheads, "f_frag": float(Fraction(over["f_frag"])),
                      "M_buf": int(over["M_buf"])},
        "counts": {"lattice_candidates": enum.candidates, "valid_layouts": len(enum),
                   "rejected": dict(sorted(enum.rejected.items())), "considered": result.considered,
                   "fitting": result.fitting, "invalid_configurations": dict(sorted(result.invalid.items()))},
        "sort": args.sort, "attention": args.attention,
        **({"routing": {"judged_at": common.as_number(args.imbalance), "balanced": 1}} if args.imbalance != 1 else {}),
        **({"time": _time_json(result)} if "step_time" in result.columns else {}),
        "schedule": {"name": result.schedule, "global_batch": result.global_batch, "microbatches": args.microbatches,
                     "vpp": args.vpp, "gpus_per_node": args.gpus_per_node or 8,
                     "view": "pipeline schedule: each configuration at its most-loaded device with its in-flight "
                             "micro-batches" if result.schedule else
                             "the paper's idealisation: one micro-batch per stage (optimistic for PP > 1; give "
                             "--global-batch or --schedule)"},
        **({"memory": {**{k: v for k, v in result.judged.items() if k != "bytes"}, "alloc_conf": args.alloc_conf}}
           if result.judged else {}),
        **common.defaults_used(args),
    }


def _time_json(result) -> dict:
    """The step-time model's assumptions the rows are timed and ranked by, named as ``estimate --time --json``
    names them (efficiency: "published", the tables of config/efficiency.toml, or the one fraction of peak)."""
    t = result.time
    eff = t["efficiency"]
    return {"gpu": t["gpu"].key, "efficiency": eff if eff == "published" else float(eff), "overlap": t["overlap"],
            "dispatcher": t["dispatcher"], "nvlink_domain": t["gpus_per_node"]}


def write_json(model, args, hbm, result, idx) -> None:
    """JSON with one object per row, formatted straight from the columns (tens of thousands of rows)."""
    from derivations.analyses import search as S
    head = json.dumps(_header(model, args, hbm, result), indent=2)
    cols, keys = S.columns(result, idx), S.row_keys(result)
    quoted = {p: json.dumps(p) for p in result.policies}
    cols["recompute"] = [quoted[x] for x in cols["recompute"]]
    template = "    {" + ", ".join(f'"{k}": %{"s" if k == "recompute" else "r" if k in S.TIME_KEYS else "d"}'
                                   for k in keys) + "}"
    body = ",\n".join(template % vals for vals in zip(*(cols[k] for k in keys)))
    sys.stdout.write(head[:-2] + ',\n  "rows": [\n' + body + "\n  ]\n}\n")


def csv_text(rows) -> str:
    import csv
    from derivations.analyses import search as S
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else list(S.ROW_KEYS), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render_text(model, args, hbm, result, idx) -> str:
    from derivations.analyses import search as S
    h = _header(model, args, hbm, result)
    c = h["counts"]
    rej = ", ".join(f"{k} {fmt_int(v)}" for k, v in c["rejected"].items()) or "none"
    o = h["overheads"]
    n_b, n_s = len(set(args.mbs)), len(set(args.seq))
    lines = [
        f"memsym search: {model.name} on {args.gpus} GPUs, {fmt_gib(hbm)} GiB per device ("
        + (f"{h['capacity_of']}'s usable capacity{'' if args.gpu else ', the default: --gpu or --hbm'})"
           if args.hbm is None else "--hbm: a budget as typed, not a GPU's usable bytes)"),
        f"layouts: {fmt_int(c['lattice_candidates'])} candidates with DP*TP*PP*CP = {args.gpus}, "
        f"{fmt_int(c['valid_layouts'])} valid (rejected: {rej})",
        f"configurations considered: {fmt_int(c['considered'])} (layouts x {count(n_b, 'micro-batch size')} x "
        f"{count(n_s, 'sequence length')} x {count(len(set(args.zero)), 'ZeRO stage')} x "
        f"{count(len(result.policies), 'recomputation policy', 'recomputation policies')}), every "
        f"pipeline stage evaluated, each judged at its most-loaded stage; attention: {args.attention}"
        + (" (fused, no s x s tensor; --attention eager: the paper's)" if args.attention == "flash" else
           " (the paper's view)"),
        _judged_line(result.judged, args.top or 20) if result.judged else
        f"fit: peak = (1 + {o['f_frag']:.2f}) x total + {fmt_gib(o['M_buf'])} GiB <= {fmt_gib(hbm)} GiB "
        f"(Sec. 6, {o['end']} end): {fmt_int(c['fitting'])} configurations fit",
        "step: total at the step's peak; under recomputation activ adds the layer one micro-batch's backward "
        "rebuilds (memsym estimate: '+ one backward')",
        *common.routing_judged(args.imbalance),
        "view: " + h["schedule"]["view"] + (f" ({result.schedule}" + (f", global batch {result.global_batch}"
                                                                       if result.global_batch else "") + ")"
                                            if result.schedule else ""),
    ]
    if c["invalid_configurations"]:
        lines.append("invalid configurations: " + ", ".join(f"{k} {fmt_int(v)}"
                                                             for k, v in c["invalid_configurations"].items()))
    if not len(idx):
        lines.append("no configuration fits")
        return "\n".join(ln if len(ln) <= 100 else _fold(ln) for ln in lines)
    how = {"peak": "peak, largest first", "headroom": "headroom, most first",
           "bubble": "fewest pipeline bubbles, then most headroom, then smaller TP",
           "time": "estimated tokens per second per GPU, most first (the shortest step under a global batch), then "
                   "most headroom"}[args.sort]
    sched = "microbatches" in result.columns
    timed = "step_time" in result.columns
    wide = getattr(args, "wide", False)
    if timed:
        lines += _time_header(result)
    per = ("device" if sched else "stage", "step" if sched else "micro-batch")
    narrow = timed and not wide
    if narrow:
        lines += ["", f"top {len(idx)} by {how}", f"(GiB at the most-loaded {per[0]}; seconds per {per[1]}: compute "
                  "with recomputation, the exposed transfers of every group, the bubble; --wide: every component and "
                  "group)"]
    else:
        lines += ["", f"top {len(idx)} by {how} (GiB; stage = most-loaded {per[0]}"
                  + (f"; seconds per {per[1]}, exposed transfers per group" if timed else "") + ")"]
    # (header, width, value of a row): the layout, then the narrow table's memory and time or every component
    key, gib, sec = (lambda k: lambda r: r[k]), (lambda k: lambda r: fmt_gib(r[k])), (lambda k: lambda r: seconds(r[k]))
    spec = [(h, w, key(k)) for h, w, k in (("DP", 5, "dp"), ("TP", 4, "tp"), ("PP", 4, "pp"), ("EP", 4, "ep"),
                                           ("ETP", 4, "etp"), ("CP", 4, "cp"))]
    tokens = ("tok/s/GPU", 10, lambda r: fmt_int(round(r["tokens_per_gpu_s"])))
    if narrow:
        spec += [("Z", 2, key("zero")), ("recompute", 10, key("recompute")), ("b", 3, key("mbs"))]
        spec += ([("m", 5, key("microbatches"))] if sched else []) + [
            ("peak", 7, gib("peak")), ("free", 7, gib("headroom")), ("time", 7, sec("step_time")), tokens,
            ("comp", 7, lambda r: seconds(r["time_compute"] + r["time_recompute"])),
            ("comm", 7, lambda r: seconds(sum(r[f"time_{g}"] for g in ("TP", "EP", "CP", "PP", "DP")))),
            ("bubble", 7, sec("time_bubble"))]
    else:
        spec += [("ZeRO", 5, key("zero")), ("recompute", 11, key("recompute")), ("b", 3, key("mbs")),
                 ("s", 7, key("seq"))] + ([("m", 6, key("microbatches"))] if sched else [])
        spec.append(("stage", 6, key("stage")))
        spec += [(h, w, gib(k)) for h, w, k in (("weights", 9, "weights"), ("grads", 8, "gradients"),
                                                ("optim", 8, "optimizer"), ("activ", 8, "activations"),
                                                ("total", 8, "total"), ("peak", 8, "peak"),
                                                ("headroom", 9, "headroom"))]
        if timed:
            spec += [("time", 7, sec("step_time")), tokens, ("compute", 8, sec("time_compute")),
                     ("recomp", 7, sec("time_recompute"))]
            spec += [(g, 7, sec(f"time_{g}")) for g in ("TP", "EP", "CP", "PP", "DP")]
            spec.append(("bubble", 7, sec("time_bubble")))
    rows = S.rows(result, idx)
    if result.judged:  # the peak and headroom shown are of the kind judged, under its name
        rows = [{**r, "peak": r[args.memory], "headroom": hbm - r[args.memory]} for r in rows]
        spec = [(args.memory if h == "peak" else h, w, f) for h, w, f in spec]
    cols, widths = [h for h, _, _ in spec], [w for _, w, _ in spec]
    table = [[f(r) for _, _, f in spec] for r in rows]
    # a column widens with its values (CP=1024, huge bytes) and name so neighbours never run together
    widths = [max(w, len(cols[i]) + 1, 1 + max(len(str(v[i])) for v in table)) for i, w in enumerate(widths)]
    lines.append("".join(f"{x:>{w}}" for x, w in zip(cols, widths)))
    for vals in table:
        lines.append("".join(f"{x:>{w}}" for x, w in zip(vals, widths)))
    if not wide:
        lines = [ln if len(ln) <= 100 or ln.startswith(" ") else _fold(ln) for ln in lines]
    return "\n".join(lines)


def _judged_line(j, top) -> str:
    """The fit line of --memory KIND: what is judged, against which capacity, and how many rows were judged."""
    what = {"allocated": "the caching allocator's allocated peak over the step",
            "reserved": "PyTorch's caching allocator run over the step",
            "device": "its reserved bytes + NCCL/DeepEP buffers"}[j["kind"]]
    graphs = f" --cuda-graphs {','.join(j['cuda_graphs'])}" if j.get("cuda_graphs") else ""
    return (f"fit: --memory {j['kind']}: {j['kind']} bytes ({what}, as memsym estimate --memory {j['kind']}"
            f"{graphs}) <= "
            f"{j['capacity_of']} {fmt_gib(j['capacity'])} GiB at the most-loaded stage; the "
            f"{fmt_int(j['terms_fitting'])} configurations whose terms fit (allocated >= the terms) judged in rank "
            f"order until {top} fit: {fmt_int(j['judged'])} judged, {fmt_int(j['over_capacity'])} of them fit "
            f"allocated memory but not " + ("the device" if j["kind"] == "device" else f"their {j['kind']} bytes"))


def _fold(line: str) -> str:
    """A header line folded at 100 columns between words."""
    import textwrap  # lazy: text output only
    return textwrap.fill(line, 100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def _time_header(result) -> list:
    """The step-time model's assumptions, one line each."""
    t = result.time
    g = t["gpu"]
    eff = t["efficiency"]
    return [f"time: derivations/steptime on {g.name}: {g.rate('bf16') / 1e12:,.1f} TFLOP/s BF16 dense x "
            f"efficiency {efficiency_text(eff)}, HBM {g.rate('hbm_bandwidth') / 1e12:g} TB/s, "
            f"NVLink {g.rate('nvlink') / 1e9:g} GB/s, "
            f"network {g.rate('network') / 1e9:g} GB/s per GPU, {t['gpus_per_node']} GPUs per NVLink domain; overlap "
            f"{t['overlap']}, dispatcher {t['dispatcher']}"
            + ("" if result.schedule else "; no schedule: one micro-batch's period in steady state (no bubble, "
                                         "no per-step data-parallel traffic but ZeRO-3's, no optimizer update)")]
