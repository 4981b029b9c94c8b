"""What ``memsym estimate`` prints as text: one stage (:func:`render_text`), every stage (:func:`render_all`), and
the training's one-line policy (:func:`policy`) their headers share."""
from __future__ import annotations

from derivations import config as cfg
from derivations import families
from derivations.assembly import explain
from symbolic.exact import count, fmt_gib, fmt_int
from derivations.config.switches import preset_of
from derivations.config.values import PAPER_BYTES


def device_lines(est, device) -> list:
    if not device:
        return []
    name, hbm = device
    lo, hi = est.overheads["low"]["peak"], est.overheads["high"]["peak"]
    verdict = "fits" if hi <= hbm else ("fits only at the low end" if lo <= hbm else "does not fit")
    return ["", f"per-GPU peak against one {name} ({fmt_gib(hbm, 0)} GiB): {fmt_gib(lo)} - {fmt_gib(hi)} GiB "
                f"({float(lo / hbm):.0%} - {float(hi / hbm):.0%}), {verdict}; allocated (no overheads) "
                f"{fmt_gib(est.bytes['total'])} GiB"]


def policy(tr) -> str:
    out = f"recompute {tr.recompute_label}"
    if tr.attention != "eager":
        out += f"; attention {tr.attention}"
    if tr.fp8:
        out += "; FP8 activations"
    if tr.imbalance != 1:
        out += f"; imbalance F={float(tr.imbalance):g}"
    preset = preset_of(tr)
    if preset != "paper":
        changed = [f"{k}={v}" for k, v in tr.conventions.changed()]
        if preset or changed:
            out += f"; conventions {preset}" if preset else "; conventions " + ",".join(changed)
    if tr.conventions.mtp_activations != "none":  # orthogonal to the preset: whether MTP modules are trained
        out += f"; MTP modules trained (--mtp-activations {tr.conventions.mtp_activations})"
    if tr.schedule:
        m = tr.microbatches if tr.microbatches is not None else "enough"
        out += f"; schedule {tr.schedule} (m={m}" + (f", V={tr.vpp}" if tr.vpp else "") + ")"
    return out


def _bytes_dtypes(tr) -> str:
    d = dict(tr.bytes)
    if all(d.get(k) == v for k, v in PAPER_BYTES.items()):
        return ""
    return "bytes per element: " + " ".join(f"{k}={fmt_int(v)}" for k, v in tr.bytes)


def render_all(every, worst, device=None, timed=None) -> str:
    """Every stage, the most-loaded marked; with ``timed`` (--time), each one's time per micro-batch."""
    per_mb = {s["stage"]: s["parts"]["microbatch"] for s in timed["stages"]} if timed else {}
    e0 = every[0]
    lay, tr = e0.layout, e0.training
    lines = [f"memsym estimate: {e0.model.name}, every stage of PP={lay.pp}; layout DP={lay.dp} TP={lay.tp} "
             f"PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp}; ZeRO {tr.zero} "
             f"({cfg.ZERO_NAMES[tr.zero]}); {policy(tr)}; b={tr.mbs} s={tr.seq}",
             "activations: "
             + ("held at the peak = in-flight x per micro-batch (interleaved: the head, loss and MTP modules once)"
                if tr.schedule == "interleaved" else
                "held at the peak = in-flight x per micro-batch" if tr.schedule else "one micro-batch")
             + f" ({e0.term_ids['activations']}); GiB",
             "",
             ]
    contents = [explain.stage_content(e.stage, e.model.family)
                + (f" + stage {e.held[1].index} ({explain.stage_content(e.held[1], e.model.family)})"
                   if len(e.held) > 1 else "") for e in every]
    wc = max(30, 2 + max(len(c) for c in contents))
    runtime = "runtime" in e0.bytes
    lines.append(f"  {'stage':<6}{'layers':<12}{'content':<{wc}}{'in flight':>10}{'act/mb':>9}{'act':>9}"
                 f"{'weights':>9}{'grads':>9}{'optim':>9}" + (f"{'runtime':>9}" if runtime else "") + f"{'total':>9}"
                 + (f"{'s/mb':>9}" if per_mb else ""))
    for e, content in zip(every, contents):
        st = e.stage
        layers = st.label.replace("layers ", "").replace("layer ", "")
        fl = "1" if e.inflight is None else fmt_int(e.inflight)
        if len(e.chunks) > 1:
            fl = "+".join(fmt_int(n) for _, n in e.chunks)
        b = e.bytes
        lines.append(f"{'*' if e.stage.index == worst else ' '} {st.index:<6}{layers:<12}{content:<{wc}}{fl:>10}"
                     f"{fmt_gib(b['activations_per_microbatch']):>9}{fmt_gib(b['activations']):>9}"
                     f"{fmt_gib(b['weights']):>9}{fmt_gib(b['gradients']):>9}{fmt_gib(b['optimizer']):>9}"
                     + (f"{fmt_gib(b['runtime'] + b.get('graphs', 0)):>9}" if runtime else "")
                     + f"{fmt_gib(b['total']):>9}"
                     + (f"{per_mb[st.index]:>9.4f}" if per_mb else ""))
    w = every[worst]
    lines += ["", f"* most-loaded: stage {worst} ({fmt_gib(w.bytes['total'])} GiB allocated; with Sec. 6 overheads "
                  f"{fmt_gib(w.overheads['low']['peak'])} - {fmt_gib(w.overheads['high']['peak'])} GiB)"]
    lines += device_lines(w, device)
    if w.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in w.assumptions]
    return "\n".join(lines)


def render_text(est) -> str:
    lay, tr, st = est.layout, est.training, est.stage
    # column widths grow with the values (a huge --seq), so wide numbers never run together
    wb = max(18, 2 + max(len(fmt_int(v)) for v in est.bytes.values()))
    wg = max(10, 2 + max(len(fmt_gib(v)) for v in est.bytes.values()))
    kinds = [what for what, held in (("embedding", st.embedding), (f"{st.dense} dense layer{'s' * (st.dense != 1)}",
             st.dense), (f"{st.moe} MoE layer{'s' * (st.moe != 1)}", st.moe), ("output head", st.head)) if held]
    lines = [
        f"memsym estimate: {est.model.name}, one device of stage {st.index} of {lay.pp} ({st.label}: "
        f"{', '.join(kinds)})",
        f"layout DP={lay.dp} TP={lay.tp} PP={lay.pp} EP={lay.ep} ETP={lay.etp} SP={lay.SP} CP={lay.cp} "
        f"(EDP={fmt_int(lay.edp)}); ZeRO {tr.zero} ({cfg.ZERO_NAMES[tr.zero]}); {policy(tr)}; "
        f"b={tr.mbs} s={tr.seq}",
        *explain.explain_split(est),
        "",
        f"{'parameters on the device':<28}{'params':>18}",
        f"{'  non-MoE (P_n)':<28}{fmt_int(est.params['non_moe']):>18}",
        f"{'  MoE (P_m)':<28}{fmt_int(est.params['moe']):>18}",
        f"{'  total':<28}{fmt_int(est.params['total']):>18}",
        *explain.explain_params(est),
        "",
        f"{'bytes on the device':<28}{'bytes':>{wb}}{'GiB':>{wg}}  term",
    ]
    b, ids = est.bytes, est.term_ids

    def row(label, key, note):  # one line of the bytes table
        return f"  {label:<26}{fmt_int(b[key]):>{wb}}{fmt_gib(b[key]):>{wg}}  {note}"
    lines += [row({"runtime": "runtime buffers", "graphs": "CUDA graphs' static io"}.get(k, k), k, ids[k])
              for k in ("weights", "gradients", "optimizer", "activations", "runtime", "graphs") if k in b]
    lines.append(row("total", "total", "(at the end of the forward)"))
    if b["step"]:
        moment = "+ the graphs' capture" if ids["step"] == "step.graph.capture" else "+ one backward"
        lines += [row(moment, "step", ids["step"]),
                  row("total at the step peak", "step_total", "(what a verdict judges)")]
    fam = families.get(est.model.family)
    one = f"({fam.layer_name or ('one MoE layer' if 'moe' in fam.kinds else 'one layer')}, act.)"
    lines.append(row(one, "activations_per_layer", ids["activations_per_layer"]))
    if est.training.schedule:
        lines.append(row("(one micro-batch, act.)", "activations_per_microbatch", ids["activations_per_microbatch"]))
        lines += _schedule_lines(est)
    if _bytes_dtypes(tr):
        lines.append(f"  {_bytes_dtypes(tr)}")
    lines.append("")
    lines.append("Sec. 6 overheads (not in the total): fragmentation 5%-30% of allocated memory, buffers 0.8-2 GiB")
    for end in ("low", "high"):
        o = est.overheads[end]
        lines.append(f"  {end:<5} f_frag={float(o['f_frag']):.2f} +{fmt_gib(o['fragmentation'])} GiB, buffers "
                     f"{fmt_gib(o['buffers'])} GiB -> peak {fmt_gib(o['peak'])} GiB"
                     + (f"; at the step peak {fmt_gib(o['step_peak'])} GiB" if est.bytes["step"] else ""))
    if est.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in est.assumptions]
    return "\n".join(lines)


def _schedule_lines(est) -> list:
    """Under a schedule: the in-flight count and (DualPipe) the second stage."""
    from derivations.assembly.schedules import TITLES
    lines = []
    if est.virtual:  # Megatron's virtual stages (--virtual-layers): each chunk's own count
        parts = " + ".join(f"{fmt_int(n)} of chunk {j} ({c.label})" for j, (c, n) in enumerate(est.chunks))
        how = ("activations = each chunk's in-flight micro-batches x its layers' activations (the largest state of "
               "the order)")
        what = f"{fmt_int(est.inflight)} micro-batches of the stage's layers (layer-weighted)"
    else:
        parts = " + ".join(f"{fmt_int(n)} of stage {c.index}" for c, n in est.chunks)
        how = "activations = n_fl x one micro-batch's" + (" layers" if est.head_inflight is not None else "")
        what = count(est.inflight, 'micro-batch', 'micro-batches')
    if est.head_inflight is not None:
        how += (", plus the head, loss and MTP modules held for "
                f"{count(est.head_inflight, 'micro-batch', 'micro-batches')} (the last rank's last chunk)")
    lines.append(f"  schedule {TITLES[est.training.schedule]}: {what} in flight at the peak ({parts}); {how}")
    if len(est.held) > 1:
        other = est.held[1]
        lines.append(f"  DualPipe: this device also holds stage {other.index} ({other.label}: "
                     f"{explain.stage_content(other, est.model.family)}); parameters, gradients and optimizer states "
                     "count both stages")
    return lines
