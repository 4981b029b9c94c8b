"""The command lines whose ``--json`` outputs are kept in ``outputs.jsonl`` (recorded before the
"Architecture II" restructuring, which must leave every byte of them as it was).

``python -m tests.golden.commands record`` writes ``outputs.jsonl`` (each line: the argv and what
``memsym.cli.main(argv)`` printed and returned); ``tests/test_golden.py`` runs them again and
compares.  Regenerate (and say why in the commit) only when a change is meant to alter numbers.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = Path(__file__).with_name("outputs.jsonl")
#: Text outputs (no --json) of :func:`text_commands`, recorded later (before the text explanations of
#: estimate and params moved onto the generated evaluators): ``python -m tests.golden.commands record-text``.
TEXT_OUTPUTS = Path(__file__).with_name("outputs-text.jsonl")

MODELS = ["deepseek-v3", "deepseek-v2", "deepseek-v2-lite",
          *[f"paper/models/{p.name}" for p in sorted((ROOT / "paper" / "models").glob("*.json"))],
          *[f"tests/data/{d}/config.json" for d in ("tiny", "tiny-512", "tiny-mtp", "tiny-512-mtp")],
          *[f"tests/data/variants/{p.name}" for p in sorted((ROOT / "tests" / "data" / "variants").glob("*.json"))]]
#: a layout every model above accepts
SMALL = ["--dp", "2", "--tp", "1", "--pp", "1", "--ep", "2", "--etp", "1"]


def commands():
    out = []
    # every model: parameters, an estimate at a small layout, a comparison
    for m in MODELS:
        out.append(["params", "--model", m, "--json"])
        out.append(["params", "--model", m, "--accounting", "checkpoint", "--json"])
        out.append(["estimate", "--model", m, *SMALL, "--json"])
        out.append(["estimate", "--model", m, *SMALL, "--conventions", "mcore", "--recompute", "full", "--json"])
        out.append(["compare", "--model", m, *SMALL, "--json"])
        out.append(["fit", "--model", m, *SMALL, "--hbm", "80GiB", "--json"])
    # the paper's model: layouts, ZeRO, recomputation, kernels, precision
    for z in ("0", "1", "2", "3"):
        for rc in ("none", "full", "selective", "custom:norm,mla_up"):
            out.append(["estimate", "--zero", z, "--recompute", rc, "--json"])
    for extra in (["--attention", "flash"], ["--fp8-activations"], ["--mbs", "4", "--seq", "8192"], ["--cp", "2"],
                  ["--imbalance", "1.25"], ["--tp", "4", "--ep", "16", "--dp", "64"], ["--stage", "0"],
                  ["--stage", "15"],
                  ["--layers-per-stage", "5,4,4,4,4,4,4,4,4,4,4,4,4,4,3,1"], ["--bytes-per-param", "distributed"],
                  ["--weight-dtype", "fp32", "--act-dtype", "fp32"], ["--optimizer-dtype", "bf16"], ["--mtp"],
                  ["--recipe", "deepseek-v3"], ["--recipe", "paper"], ["--gpu", "h800"],
                  ["--gpu", "h100", "--zero", "3"],
                  ["--hbm", "80GiB"], ["--all-stages"], ["--global-batch", "1024"]):
        out.append(["estimate", *extra, "--json"])
    # conventions presets and single switches
    for conv in ("paper", "megatron", "modelzoo", "transformers", "mcore", "mcore-te"):
        out.append(["estimate", "--conventions", conv, "--json"])
        out.append(["estimate", "--conventions", conv, "--recompute", "selective", "--attention", "flash", "--json"])
        out.append(["estimate", "--conventions", conv, "--schedule", "1f1b", "--microbatches", "32", "--json"])
    out.append(["estimate", "--conventions", "mcore", "--kernels", "te", "--json"])
    out.append(["estimate", "--conventions", "mcore", "--mtp-activations", "last-stage", "--mtp", "--stage", "15",
                "--json"])
    out.append(["estimate", "--conventions", "megatron", "--mtp", "--json"])
    # schedules
    for sched, extra in (("1f1b", []), ("zb", []), ("interleaved", ["--vpp", "2"]), ("interleaved", ["--vpp", "4"]),
                         ("dualpipe", [])):
        for m in ("8", "64"):
            out.append(["estimate", "--schedule", sched, *extra, "--microbatches", m, "--json"])
        out.append(["estimate", "--schedule", sched, *extra, "--all-stages", "--json"])
        out.append(["fit", "--schedule", sched, *extra, "--hbm", "80GiB", "--global-batch", "4096", "--json"])
    out.append(["estimate", "--schedule", "dualpipe", "--microbatches", "32", "--json"])
    out.append(["estimate", "--model", "paper/models/mcore-proxy-h1024-l16-d3-mtp1.json", "--conventions", "mcore-te",
                "--dp", "2", "--tp", "2", "--pp", "2", "--ep", "4", "--layers-per-stage", "9,7", "--mbs", "4",
                "--global-batch", "32", "--schedule", "interleaved", "--vpp", "4", "--virtual-layers",
                "3,2,2,2,2,2,2,1", "--json"])
    # fit
    for solve in ("mbs", "seq"):
        for z in ("0", "1", "3"):
            out.append(["fit", "--solve", solve, "--zero", z, "--hbm", "80GiB", "--json"])
        out.append(["fit", "--solve", solve, "--gpu", "h800", "--recompute", "full", "--json"])
        out.append(["fit", "--solve", solve, "--hbm", "141GB", "--overheads", "low", "--json"])
    # search
    for gpus in ("64", "256", "1024"):
        out.append(["search", "--gpus", gpus, "--hbm", "80GiB", "--top", "20", "--json"])
    out.append(["search", "--gpus", "256", "--gpu", "h800", "--zero", "1,3", "--recompute", "none,full", "--top", "10",
                "--json"])
    out.append(["search", "--gpus", "512", "--hbm", "80GiB", "--global-batch", "4096", "--top", "10", "--json"])
    out.append(["search", "--gpus", "512", "--hbm", "80GiB", "--schedule", "dualpipe", "--global-batch", "4096",
                "--top", "10", "--json"])
    out.append(["search", "--gpus", "64", "--hbm", "80GiB", "--mbs", "1,2", "--seq", "2048,4096", "--top", "10",
                "--json"])
    out.append(["search", "--model", "deepseek-v2-lite", "--gpus", "16", "--hbm", "40GiB", "--top", "10", "--json"])
    out.append(["search", "--gpus", "128", "--hbm", "80GiB", "--sort", "headroom", "--top", "10", "--json"])
    out.append(["search", "--gpus", "128", "--hbm", "80GiB", "--overheads", "low", "--all-configurations", "--top",
                "10", "--json"])
    # compare
    for extra in ([], ["--conventions", "paper,transformers"], ["--conventions", "paper,mcore,mcore-te"],
                  ["--recompute", "full"], ["--mtp"], ["--zero", "1"]):
        out.append(["compare", *extra, "--json"])
    return out


def text_commands():
    """The text (not --json) outputs of estimate, params, compare and fit over models and options."""
    out = []
    for m in MODELS:
        out.append(["estimate", "--model", m, *SMALL])
        out.append(["params", "--model", m, "--mtp"])
    for extra in ([], ["--zero", "1"], ["--recompute", "full"], ["--gpu", "h800"], ["--gpu", "h100", "--zero", "3"],
                  ["--rank", "megatron"], ["--rank", "modelzoo"], ["--conventions", "megatron", "--mtp"],
                  ["--shared-expert", "tp"], ["--schedule", "dualpipe", "--microbatches", "32"],
                  ["--schedule", "interleaved", "--vpp", "2", "--microbatches", "16"], ["--all-stages"],
                  ["--conventions", "mcore", "--mtp", "--mtp-activations", "last-stage", "--stage", "15"],
                  ["--recipe", "deepseek-v3", "--gpu", "h800"], ["--tensors"], ["--tensors", "--conventions", "mcore"],
                  ["--stage", "0"], ["--stage", "15"], ["--fp8-activations", "--recompute", "custom:norm,swiglu"]):
        out.append(["estimate", *extra])
    out += [["params"], ["params", "--accounting", "checkpoint"], ["params", "--pp", "4"], ["compare"],
            ["fit", "--hbm", "80GiB"], ["fit", "--gpu", "h800", "--solve", "seq"]]
    return out


def run(argv):
    """(exit status, stdout, stderr) of ``memsym.cli.main(argv)`` in this process."""
    from memsym.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def record(path=OUTPUTS, lines=commands) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for argv in lines():
            rc, out, err = run(argv)
            f.write(json.dumps({"argv": argv, "rc": rc, "stdout": out, "stderr": err}) + "\n")
            print(rc, " ".join(argv), file=sys.__stderr__)


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    record()
if __name__ == "__main__" and sys.argv[1:] == ["record-text"]:
    record(TEXT_OUTPUTS, text_commands)
