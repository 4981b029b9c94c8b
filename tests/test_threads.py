"""First use from threads (issue 44): 14 threads making their first API call at once in a fresh process, over
every family (registry, generated evaluators, presets and config readers all loaded lazily), give what the same
calls give one after another."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, sys, threading
import memsym
models = ["deepseek-v3", "deepseek-v2-lite", "paper/models/glm-5.json", "paper/models/deepseek-v4-flash.json",
          "paper/models/kimi-k2.json", "paper/models/deepseek-v3.2-exp.json", "deepseek-v2"]
def call(i):
    m = models[i % len(models)]
    r = memsym.params(m) if i % 2 else memsym.estimate(m, pp=1, dp=8, ep=8, tp=1)
    return json.dumps(r.to_dict(), sort_keys=True)
out, errors = {}, []
if sys.argv[1] == "threads":
    barrier = threading.Barrier(14)
    def go(i):
        try:
            barrier.wait()
            out[i] = call(i)
        except Exception as exc:
            errors.append(f"{i}: {type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=go, args=(i,)) for i in range(14)]
    [t.start() for t in threads]
    [t.join() for t in threads]
else:
    out = {i: call(i) for i in range(14)}
print(json.dumps({"out": {str(k): v for k, v in out.items()}, "errors": errors}))
"""


def _run(mode):
    p = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_fourteen_threads_on_first_use_give_what_one_thread_gives():
    sequential = _run("one")
    for _ in range(3):
        got = _run("threads")
        assert got["errors"] == [] and got["out"] == sequential["out"]
