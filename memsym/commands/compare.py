"""memsym compare: the paper, Megatron-LM and NVIDIA's ModelZoo side by side, and the gap itemised."""
from __future__ import annotations

from dataclasses import replace

from derivations import config as cfg
from symbolic.exact import fmt_gib, fmt_int
from . import common
from derivations.config.switches import CONVENTION_SWITCHES, ORDER, switches_json

#: Each switch's name in the table: the switches' own (derivations/config/switches.py), and the three
#: switches held in Training.
LABELS = {"attention": "attention kernel", "bytes_per_param": "bytes per parameter", "mtp": "MTP layers",
          **{name: spec.label for name, spec in CONVENTION_SWITCHES.items()}}
ORDER_HELP = ", ".join(LABELS[n] for n in cfg.CONVENTION_ORDER)
ROWS = (("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer states"),
        ("states", "model states (w + g + o)"), ("activations_per_layer", "activations, one MoE layer"),
        ("runtime", "runtime buffers"))


def add_parser(sub):
    common.build(sub, "compare", run, order=ORDER_HELP)


def _compare(args):
    from derivations.analyses.compare import compare
    c = common.configuration(args)
    training = replace(c.training, conventions=cfg.Conventions())  # the presets set them
    kw = {}
    if getattr(args, "conventions", None) is not None:
        kw["presets"] = presets_list(args.conventions)
    columns, falls = compare(c.model, c.layout, training, c.stage, args.mtp, **kw)
    return columns, falls, {name: common.memory_json(args, est) for name, (est, _) in columns.items()}


def presets_list(text: str):
    """``--conventions P,P,...``: each a preset, none empty or twice (ConfigError naming the entry)."""
    names = [x.strip() for x in str(text).split(",")]
    for name in names:
        if name not in cfg.CONVENTION_PRESETS:
            raise cfg.ConfigError("conventions",
                                  f"--conventions takes presets among {', '.join(cfg.CONVENTION_PRESETS)}, "
                                                 f"comma-separated; got {name!r} in {text!r}")
    if len(set(names)) != len(names):
        raise cfg.ConfigError("conventions", f"--conventions names a preset twice: {text!r}")
    return tuple(names)


def data(args) -> dict:
    """What ``compare --json`` prints."""
    return to_json(*_compare(args))


def run(args) -> int:
    columns, falls, memory = _compare(args)
    if args.plot:
        plot(falls, args.plot, title(columns["paper"][0]))
    if args.json:
        common.print_json(to_json(columns, falls, memory))
        return 0
    print(render(columns, falls, memory))
    if args.plot:
        print(f"\nplot: {args.plot}")
    return 0


def title(est) -> str:
    lay, tr = est.layout, est.training
    return (f"{est.model.name}, stage {est.stage.index} of {lay.pp}; DP={lay.dp} TP={lay.tp} PP={lay.pp} "
            f"EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp}; recompute {tr.recompute_label}; "
            f"b={tr.mbs} s={tr.seq}")


def to_json(columns, falls, memory) -> dict:
    e0 = columns["paper"][0]
    out = {"model": e0.model.name, "layout": e0.to_json()["layout"], "stage": e0.stage.index, "order": list(ORDER),
           "presets": {}, "waterfalls": {}}
    for name, (est, q) in columns.items():
        out["presets"][name] = {"switches": switches_json(est.training), "params": est.params["total"],
                                "zero": est.training.zero, "bytes": q,
                                "terms": {k: est.term_ids[k] for k in ("params", "weights", "gradients", "optimizer",
                                                                       "activations_per_layer")},
                                **({"memory": memory[name]} if memory[name] else {})}
    for name, f in falls.items():
        out["waterfalls"][name] = {
            "from": f.start, "to": f.end, "start": f.first, "end": f.last,
            "steps": [{"switch": s.name, "label": LABELS[s.name], "from": s.before, "to": s.after, "delta": s.delta,
                       "value": s.values} for s in f.steps],
            "largest": {"states": f.largest("states"), "activations_per_layer": f.largest("activations_per_layer")}}
    return out


def _signed(x) -> str:
    return ("+" if x > 0 else "") + fmt_int(x) if x else "0"


def render(columns, falls, memory) -> str:
    names = list(columns)
    row = lambda label, cells: f"  {label:<30}" + "".join(f"{c:>22}" for c in cells)  # a cell per preset
    both = lambda label, vals: [row(label, map(fmt_int, vals)), row("", (fmt_gib(v) + " GiB" for v in vals))]
    lines = [f"memsym compare: {title(columns['paper'][0])}", "", row("per device (bytes; GiB)", names),
             row("parameters", (fmt_int(columns[n][0].params["total"]) for n in names))]
    for key, label in ROWS:
        lines += both(label, [columns[n][1][key] for n in names])
    lines.append(row("ZeRO stage", (columns[n][0].training.zero for n in names)))
    kind = next((m["judged"] for m in memory.values() if m), None)
    if kind:  # --memory KIND: each preset's bytes of that kind, as estimate --memory KIND counts them
        lines += both(kind + " (--memory)", [memory[n][kind] for n in names])
    lines.append("  terms:")
    for n in names:
        ids = columns[n][0].term_ids
        lines.append(f"    {n:<10}params {ids['params']}; weights {ids['weights']}; optimizer {ids['optimizer']}; "
                     f"activations {ids['activations_per_layer']}")
    for name, f in falls.items():
        rt = bool(f.first["runtime"] or f.last["runtime"])  # a runtime-buffers column when a preset has them
        col = lambda v: f"{v:>18}" if rt else ""
        lines += ["", f"waterfall {f.start} -> {f.end}: one assumption at a time (fixed order: memsym compare --help)",
                  f"  {'switch':<28}{'from -> to':<30}{'model states':>18}{'act. one layer':>18}" + col("runtime"),
                  f"  {f.start:<58}{fmt_int(f.first['states']):>18}{fmt_int(f.first['activations_per_layer']):>18}"
                  + col(fmt_int(f.first["runtime"]))]
        for s in f.steps:
            change = f"{_v(s.before)} -> {_v(s.after)}"
            lines.append(f"  {LABELS[s.name]:<28}{change:<30}{_signed(s.delta['states']):>18}"
                         f"{_signed(s.delta['activations_per_layer']):>18}" + col(_signed(s.delta["runtime"])))
        lines.append(f"  {'= ' + f.end:<58}{fmt_int(f.last['states']):>18}"
                     f"{fmt_int(f.last['activations_per_layer']):>18}" + col(fmt_int(f.last["runtime"])))
        for key, label in (("activations_per_layer", "activations"), ("states", "model states")):
            big = f.largest(key)[:3]
            if big:
                lines.append(f"  largest for {label}: " + ", ".join(
                    f"{LABELS[n]} ({_signed(next(s.delta[key] for s in f.steps if s.name == n))})" for n in big))
    return "\n".join(lines)


def _v(x) -> str:
    return {True: "yes", False: "no", None: "custom"}.get(x, x) if isinstance(x, (bool, type(None))) else str(x)


def plot(falls, path: str, subtitle: str = "") -> None:
    """One row per preset: the waterfall of one MoE layer's activations and of the model states (GiB)."""
    from ..plots import _pyplot, save
    plt = _pyplot()
    GiB = cfg.GiB
    n = len(falls)
    fig, axes = plt.subplots(n, 2, figsize=(11, 3.4 * n), squeeze=False)
    for row, (name, f) in enumerate(falls.items()):
        for col, (key, what) in enumerate((("activations_per_layer", "activations of one MoE layer"),
                                           ("states", "model states (weights + gradients + optimizer)"))):
            ax = axes[row][col]
            labels = [f.start] + [LABELS[s.name] for s in f.steps] + [f.end]
            level = float(f.first[key]) / GiB
            bars = [(0.0, level, "#808080")]
            for s in f.steps:
                d = float(s.delta[key]) / GiB
                bars.append((level if d >= 0 else level + d, abs(d), "#c44e52" if d > 0 else "#4c72b0"))
                level += d
            bars.append((0.0, float(f.last[key]) / GiB, "#808080"))
            xs = list(range(len(bars)))
            ax.bar(xs, [h for _, h, _ in bars], bottom=[b for b, _, _ in bars], color=[c for _, _, c in bars],
                   edgecolor="black", linewidth=0.3)
            ax.set_xticks(xs)
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("GiB")
            ax.set_title(f"{f.start} -> {name}: {what}", fontsize=8)
            ax.grid(True, axis="y", linewidth=0.3)
    if subtitle:
        fig.suptitle(subtitle, fontsize=8)
    fig.tight_layout()
    save(fig, path)
