"""memsym trace: a real implementation's saved tensors measured on CPU (memsym/trace/) beside the framework preset's
prediction at the same config, per layer and outside the layers."""
from __future__ import annotations

import os
import sys

from symbolic.errors import ConfigError
from symbolic.files import write_atomic

from ..trace import INSTALL_HINT, hf, inputs, mcore, missing
from ..trace.compare import result
from ..trace.inputs import MCORE_SETTINGS
from ..trace.records import changes_of, to_toml, toml_string
from . import common


def add_parser(sub):
    common.build(sub, "trace", run)


def run(args) -> int:
    """Read and check everything first (memsym/trace/inputs.py), then import torch and trace."""
    conf = inputs.read(args.model)
    inputs.check_run(args.framework, conf.model, args.mbs, args.seq, args.attention, args.experts, args.recompute,
                     settings_of(args), args.fake, False, args.step)
    inputs.check_conventions(args.conventions)
    if args.record:
        _check_record(args)
    else:
        given = [o for o, v in (("--unexplained", args.unexplained), ("--change", args.change)) if v]
        if given:  # they describe a record: without one they would be dropped silently
            verb = "describe" if len(given) > 1 else "describes"
            raise ConfigError("trace.record", f"{' and '.join(given)} {verb} a record: give --record FILE")
    need = missing(args.framework)
    if need:
        print(f"memsym trace: error: {need} is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    impl = mcore if args.framework == "mcore" else hf
    try:
        rec, info = impl.run(conf.data, args.mbs, args.seq, args.act_dtype, args.attention, args.experts,
                             args.recompute, settings=settings_of(args), fake=args.fake, step=args.step)
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AssertionError, RuntimeError) as exc:
        # a config memsym accepts that the implementation cannot build or run (its own checks, a shape)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ConfigError("trace.implementation", f"{args.framework} cannot trace {args.model}: "
                                                  f"{type(exc).__name__}: {first}") from None
    out = result(args, rec, info, conf.model)
    if args.record:
        changes = args.earlier_changes + ([args.change] if args.change else [])
        write_atomic(args.record, to_toml(out, args.unexplained, conf.sha256, changes))
    if args.json:
        common.print_json(out)
    else:
        print(render(out))
    return 0


def settings_of(args) -> dict:
    """The Megatron-Core settings given on the command line (memsym/trace/inputs.py MCORE_SETTINGS)."""
    return {k: getattr(args, k) for k in MCORE_SETTINGS if getattr(args, k, None) is not None}


def _check_record(args) -> None:
    """``--record FILE`` can be written, and every string it will hold is one TOML can (before the trace)."""
    if os.path.isdir(args.record) and not os.path.islink(args.record):
        raise ConfigError("trace.record", f"--record {args.record}: is a directory; name the record's file")
    folder = os.path.dirname(os.path.abspath(args.record))
    if not os.path.isdir(folder):
        raise ConfigError("trace.record", f"--record {args.record}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ConfigError("trace.record", f"--record {args.record}: the folder {folder} is not writable")
    try:  # what is there already: a record memsym wrote (its changes kept), or nothing
        args.earlier_changes = changes_of(args.record)
    except ValueError as exc:
        raise ConfigError("trace.record", f"--record {args.record}: {exc}; not overwritten") from None
    for option, value in (("--model", args.model), ("--recompute", args.recompute),
                          ("--unexplained", args.unexplained), ("--change", args.change)):
        try:
            toml_string(value)
        except ValueError as exc:
            raise ConfigError("trace.record", f"{option}: {exc}") from None


def render(out) -> str:
    m, p = out["measured"], out["predicted"]
    s = out["settings"]
    t = out["trains"]
    trains = (f"trains: loss {t['loss']:.4f}, {t['params_with_grad']} parameters with a gradient"
              if t["loss"] is not None else "fake tensors (FakeTensorMode): forward only, no loss or backward")
    lines = [f"trace: {s['framework']} {out['versions']}, {s['model']}, b {s['mbs']}, s {s['seq']}, "
             f"{s['act_dtype']}, attention {s['attention']}, experts {s['experts']}, recompute {s['recompute']}"
             + (", fake" if s.get("fake") else ""),
             f"{trains}; routing {out['routing']}; {out['cross_check']}", "",
             f"{'layer':>8} {'kind':>6} {'measured':>14} {'predicted (' + p['conventions'] + ')':>24} {'ratio':>8}"]
    pl = {r["layer"]: r["bytes"] for r in p.get("activations_by_layer") or []}
    for r in m["activations_by_layer"]:
        q = pl.get(r["layer"])
        ratio = f"{r['bytes'] / q:.4f}" if q else "-"
        lines.append(f"{r['layer']:>8} {r['kind']:>6} {r['bytes']:>14,} {_grouped(q):>24} {ratio:>8}")
    q = p.get("activations_outside_layers")
    lines.append(f"{'outside':>8} {'':>6} {m['activations_outside_layers']:>14,} {_grouped(q):>24}")
    ok = (p.get("activations_by_layer") == m["activations_by_layer"]
          and q == m["activations_outside_layers"])
    lines += ["", "measured == predicted for every layer and outside" if ok else "measured != predicted", "",
              "per tensor family (measured bytes, every layer):"]
    for fam, v in sorted(m["families"].items(), key=lambda kv: -kv[1]["bytes"]):
        lines.append(f"  {fam:<58} {v['bytes']:>14,}  ({v['count']} storages)")
    gone = m.get("discarded") or {}
    if gone.get("storages"):
        lines += ["", f"saved during the forward by nodes freed before its end (not held, not counted): "
                      f"{gone['bytes']:,} bytes in {gone['storages']} storages"]
        for fam, v in sorted(gone["families"].items(), key=lambda kv: -kv[1]["bytes"]):
            lines.append(f"  {fam:<58} {v['bytes']:>14,}  ({v['count']} storages)")
    if out.get("step"):
        lines += [""] + render_step(out["step"])
    return "\n".join(lines)


def _grouped(n) -> str:
    return "-" if n is None else format(n, ",")


def _where(at) -> str:
    what = at.get("node") or at.get("op") or "?"
    if at.get("node") and at.get("op"):
        what += f" / {at['op']}"
    return f"{at.get('phase')}, {what}, module {at.get('module')}"


def render_step(st) -> list:
    """The profiled step (memsym/trace/step.py) as text lines."""
    lines = [f"step (torch profiler, activations only): peak {st['peak']:,} bytes in the {_where(st['at'])}"
             + (f" (reached {st['reached']} times)" if st["reached"] > 1 else ""),
             ] + ([f"  predicted ({st['predicted']['conventions']}"
                   + (", with the router's counts" if st["predicted"]["routing"] else "") + "): "
                   f"{st['predicted']['peak']:,} bytes ({st['predicted']['moment']}): "
                   + ("== measured" if st["predicted"]["peak"] == st["peak"] else
                      f"measured - predicted = {st['peak'] - st['predicted']['peak']:+,}")]
                  if st.get("predicted") else []) + [
             f"  end of the forward {st['end_of_forward']:,} = saved {st['saved_at_end_of_forward']:,} + held "
             f"otherwise {st['end_of_forward'] - st['saved_at_end_of_forward']:,}; forward peak "
             f"{st['forward_peak']:,} in the {_where(st['forward_peak_at'])}",
             f"  left out: parameter gradients {st['left_out']['gradients_at_end']:,}, kernel scratch up to "
             f"{st['left_out']['scratch']:,}, RNG states up to {st['left_out']['rng']:,} (every allocation but "
             f"parameters and gradients: peak {st['peak_allocated']:,})", "  held at the peak:"]
    lines += [f"    {h['what']:<11} {str(h['layer']):>8} {h['bytes']:>14,}" for h in st["held_at_peak"]]
    lines.append("  made in the backward and held at the peak:")
    for g in st["made_at_peak"]:
        detail = f" {g['node'] or ''} {g['op'] or ''} {g['dtype']} {g['shape']}" if g["dtype"] else ""
        lines.append(f"    {g['bytes']:>12,} {g['count']:>4}x {g['phase']:<9} {g['module']}{detail}")
    lines.append("  held at the end of the forward, not saved:")
    lines += [f"    {g['bytes']:>12,} {g['count']:>4}x {g['module']} {g['op'] or '(no op)'} {g['dtype']} {g['shape']}"
              for g in st["unsaved_at_end_of_forward"]]
    lines.append("  the backward of each layer (largest activation bytes while its nodes run):")
    lines += [f"    {str(r['layer']):>8} {r['peak']:>14,}  {_where(r['at'])}" for r in st["layers"]]
    lines += [f"  checks: {c}" for c in st["checks"]]
    return lines

