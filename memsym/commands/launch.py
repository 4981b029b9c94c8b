"""``--from-megatron FILE`` / ``--from-torchtitan FILE``: a launch read as memsym's options (derivations/config/
launch.py, megatron.py, torchtitan.py), set as if typed under those typed beside it; ``--explain`` prints them."""
from __future__ import annotations

import json
import os
import re
import sys

from ..lines import one_line
from ..argtypes import explicit


def apply(args, quiet: bool = False) -> None:
    """Set the launch's options on ``args`` under the typed ones (after parsing, before presets resolve)."""
    from symbolic.errors import ConfigError
    from derivations.config.hfconfig import from_dict
    from derivations.config.launch import read_launch
    from derivations.config.megatron import resolve
    from .keywords import namespace
    path, titan = getattr(args, "from_megatron", None), getattr(args, "from_torchtitan", None)
    if path is not None and titan is not None:
        raise ConfigError("from-torchtitan", "--from-megatron and --from-torchtitan together: give one launch file")
    if path is None and titan is None:
        extra = [o for o, d in (("--vocab-size", "vocab_size"), ("--explain", "explain")) if getattr(args, d, None)]
        if extra:
            raise ConfigError("from-megatron", f"{', '.join(extra)} read(s) a launch file: give --from-megatron FILE "
                                               "or --from-torchtitan FILE")
        return
    typed = set(explicit(args))
    known = tuple(vars(args))
    if titan is not None:
        from derivations.config.torchtitan import read_job_config, resolve as resolve_titan
        if args.vocab_size is not None:
            raise ConfigError("from-torchtitan", "--vocab-size reads Megatron's tokenizer arguments: a torchtitan "
                                                 "flavor gives its vocabulary (type --model for another)")
        path = titan
        res = resolve_titan(read_job_config(path), path, gpus=args.gpus, dp=args.dp if "dp" in typed else None,
                            build_model="model" not in typed, known=known)
    else:
        res = resolve(read_launch(path), gpus=args.gpus, dp=args.dp if "dp" in typed else None,
                      vocab=args.vocab_size, build_model="model" not in typed, known=known,
                      typed={d: getattr(args, d) for d in ("tp", "pp", "cp") if d in typed})
    opts = {k: v for k, v in res.options.items() if k in known}
    command = getattr(args, "command", None) or "estimate"
    res.unmodelled += [f"{flag_of(k)} {v} (memsym {command} has no such option)" for k, v in res.options.items()
                       if k not in known]
    flags = {k: (True if v == "True" else v) for k, v in opts.items()}
    try:
        ns = namespace(command, flags)
    except ConfigError as exc:  # a value the file sets, refused by its option's type: the file and where it says so
        m = re.match(r"memsym \S+: argument (\S+): (.*)$", str(exc))
        if m is None:
            raise
        dest = next((d for d in opts if flag_of(d) == m.group(1)), None)
        raise ConfigError("launch", f"{one_line(path)}: {res.origin.get(dest, m.group(1))}: {m.group(2)}") from None
    for dest in opts:
        if dest not in typed:
            setattr(args, dest, getattr(ns, dest))
            explicit(args).add(dest)
    if res.model is not None:
        args.model = from_dict(res.model, path, _name(path, res.model), source=path)
        explicit(args).add("model")
    args._launch, args._typed_before_launch = res, typed
    if res.unmodelled and not quiet and not getattr(args, "explain", False):
        print(one_line(f"memsym: warning: {path}: not modelled (memsym counts the job without them): "
                       f"{'; '.join(res.unmodelled)}"), file=sys.stderr)


def _name(path: str, fields) -> str:
    return (f"{one_line(os.path.basename(path))} (h {fields['hidden_size']}, {fields['num_hidden_layers']} layers, "
            f"{fields['n_routed_experts']} experts)")


def flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def explain_data(args) -> dict:
    res = args._launch
    typed = getattr(args, "_typed_before_launch", set())
    options = [{"option": flag_of(d), "value": v, "from": res.origin[d]} if d not in typed else
               {"option": flag_of(d), "value": _typed_value(args, d, v),
                "from": "typed beside the file" + (f" (the file's: {v})" if str(v) != _typed_value(args, d, v)
                                                   else " (overrides it)")}
               for d, v in res.options.items()]
    return {"launch": getattr(args, "from_torchtitan", None) or args.from_megatron, "options": options,
            "model": None if res.model is None else [{"field": k, "value": v, "from": res.model_origin.get(k, "")}
                                                      for k, v in res.model.items()],
            "not_modelled": list(res.unmodelled), "assumptions": list(res.notes)}


def _typed_value(args, dest: str, resolved) -> str:
    """The value typed for ``dest`` (``resolved`` when the file's layout was resolved again with it)."""
    v = getattr(args, dest, None)
    if v is None:
        return str(resolved)
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def explain(args) -> int:
    """``--explain``: the resolved options (text, or JSON with --json)."""
    data = explain_data(args)
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
        return 0
    lines = [f"memsym options of {data['launch']} (typed beside it: 'typed'):"]
    w = max(len(o["option"]) + 1 + len(str(o["value"])) for o in data["options"])
    for o in data["options"]:
        shown = o["option"] + ("" if o["value"] == "True" else " " + str(o["value"]))
        lines.append(f"  {shown:<{w}}  {o['from']}")
    if data["model"]:
        lines += ["", "--model: a DeepSeek-V3 config built from the file (config.json field, value, source):"]
        wf = max(len(f"{m['field']} {m['value']}") for m in data["model"])
        lines += [f"  {m['field'] + ' ' + str(m['value']):<{wf}}  {m['from']}" for m in data["model"]]
    if data["not_modelled"]:
        lines += ["", "not modelled (memsym counts the job without them):"] + [f"  {x}" for x in data["not_modelled"]]
    if data["assumptions"]:
        lines += ["", "assumptions:"] + [f"  - {x}" for x in data["assumptions"]]
    print("\n".join(lines))
    return 0
