"""Hostile config.json files: malformed, truncated, enormous, deeply nested,
wrong-typed and adversarial.  Each one exits 2 with one line naming the field or the byte
offset, quickly, through ``memsym estimate --model FILE``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from derivations.config.presets import preset_path
from memsym.cli import main

BASE = json.loads(open(preset_path("deepseek-v3"), "rb").read())


def _with(**changes):
    d = dict(BASE)
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return json.dumps(d).encode()


_DROP = object()

# (name, file bytes, what the message must name)
CASES = [
    ("empty", b"", "byte 0"),
    ("truncated", json.dumps(BASE).encode()[:200], "byte 1"),
    ("trailing garbage", json.dumps(BASE).encode() + b"}", "byte "),
    ("not json", b"model_type = deepseek_v3\n", "byte 0"),
    ("array", b"[1, 2, 3]", "JSON object"),
    ("string", b'"deepseek_v3"', "JSON object"),
    ("null", b"null", "a config.json holds a JSON object, got null"),
    ("latin-1", json.dumps({"name": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"), "byte 13"),
    ("utf-16", json.dumps(BASE).encode("utf-16"), "UTF-16"),
    ("nested 100000", b"[" * 100000 + b"]" * 100000, "nested deeper than 32 levels at byte 32"),
    ("nested objects", b'{"a":' * 5000 + b"1" + b"}" * 5000, "nested deeper than 32 levels"),
    ("nested 40", b'{"model_type": "deepseek_v3", "x": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper"),
    ("huge integer", b'{"hidden_size": ' + b"9" * 5000 + b"}", "5000 digits at byte 16"),
    ("duplicate field", b'{"hidden_size": 7168, "hidden_size": 1}', "hidden_size"),
    ("layers 1e9", _with(num_hidden_layers=10 ** 9), "num_hidden_layers"),
    ("layers float", _with(num_hidden_layers=1e9), "num_hidden_layers"),
    ("layers string", _with(num_hidden_layers="61"), "num_hidden_layers"),
    ("layers bool", _with(num_hidden_layers=True), "num_hidden_layers"),
    ("layers null", _with(num_hidden_layers=None), "num_hidden_layers"),
    ("layers zero", _with(num_hidden_layers=0), "num_hidden_layers"),
    ("layers negative", _with(num_hidden_layers=-61), "num_hidden_layers"),
    ("hidden 2^30", _with(hidden_size=2 ** 30), "hidden_size"),
    ("vocab 2^40", _with(vocab_size=2 ** 40), "vocab_size"),
    ("experts list", _with(n_routed_experts=[256]), "n_routed_experts"),
    ("experts object", _with(n_routed_experts={"n": 256}), "n_routed_experts"),
    ("missing hidden", _with(hidden_size=_DROP), "hidden_size"),
    ("missing model_type", _with(model_type=_DROP), "model_type"),
    ("other model_type", _with(model_type="llama"), "model_type"),
    ("huge model_type", _with(model_type="x" * 1_000_000), "model_type"),
    ("topk list", _with(topk_method=["noaux_tc"]), "topk_method"),
    ("tie string", _with(tie_word_embeddings="yes"), "tie_word_embeddings"),
    ("NaN heads", json.dumps(BASE).replace('"num_attention_heads": 128', '"num_attention_heads": NaN').encode(),
     "num_attention_heads"),
    ("Infinity heads", json.dumps(BASE).replace('"num_attention_heads": 128', '"num_attention_heads": Infinity')
     .encode(), "num_attention_heads"),
    ("top-k above experts", _with(num_experts_per_tok=1000), "num_experts_per_tok"),
    ("dense above layers", _with(first_k_dense_replace=100), "first_k_dense_replace"),
    ("MTP 2^20", _with(num_nextn_predict_layers=2 ** 20), "num_nextn_predict_layers"),
    ("block size huge", _with(quantization_config={"quant_method": "fp8", "weight_block_size": [2 ** 40, 128]}),
     "quantization_config"),
    ("quantization string", _with(quantization_config="fp8"), "quantization_config"),
    ("biases", _with(attention_bias=True), "attention_bias"),
    ("NUL in key", b'{"model_type\\u0000": 1}', "model_type"),
]


@pytest.fixture()
def run(capsys):
    def go(argv):
        start = time.monotonic()
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err, time.monotonic() - start
    return go


@pytest.mark.parametrize("name,data,named", CASES, ids=[c[0] for c in CASES])
def test_hostile_config_exits_2_naming_the_field_or_offset(tmp_path, run, name, data, named):
    path = tmp_path / "config.json"
    path.write_bytes(data)
    code, out, err, seconds = run(["estimate", "--model", str(path)])
    assert code == 2, (name, out[-300:], err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert named in lines[0], lines[0]
    assert str(path) in lines[0]
    assert len(lines[0]) < 1000 and seconds < 10


def test_enormous_file_is_refused_by_its_size(tmp_path, run):
    path = tmp_path / "config.json"
    with open(path, "wb") as fh:
        fh.truncate(1 << 40)  # a sparse terabyte: refused by its size, never read
    code, _, err, seconds = run(["estimate", "--model", str(path)])
    assert code == 2 and "limit 4194304 bytes" in err and seconds < 5


def test_a_bom_is_accepted(tmp_path, run):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + open(preset_path("deepseek-v3"), "rb").read())
    code, out, err, _ = run(["params", "--model", str(path), "--json"])
    assert code == 0, err


def test_a_bom_shifts_the_reported_offset(tmp_path, run):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf{,}")
    code, _, err, _ = run(["estimate", "--model", str(path)])
    assert code == 2 and "byte 4" in err, err


@pytest.mark.parametrize("device,kind", [("/dev/zero", "character device"), ("/dev/urandom", "character device"),
                                         ("/dev/null", "character device")])
def test_devices_are_named_and_never_read(run, device, kind):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    code, _, err, seconds = run(["estimate", "--model", device])
    assert code == 2 and kind in err and seconds < 5, err


def test_a_fifo_is_named_and_never_opened(tmp_path, run):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    code, _, err, seconds = run(["estimate", "--model", str(fifo)])
    assert code == 2 and "FIFO" in err and seconds < 5, err


def test_a_symlink_loop_is_named(tmp_path, run):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    os.symlink(b, a)
    os.symlink(a, b)
    code, _, err, _ = run(["estimate", "--model", str(a)])
    assert code == 2 and "symbolic link loop" in err, err
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    code, _, err, _ = run(["estimate", "--model", str(loop)])
    assert code == 2 and "symbolic link loop" in err, err


def test_a_symlink_to_a_config_still_works(tmp_path, run):
    link = tmp_path / "config.json"
    os.symlink(preset_path("deepseek-v2-lite"), link)
    code, _, err, _ = run(["params", "--model", str(link)])
    assert code == 0, err


def test_a_directory_without_config_json(tmp_path, run):
    code, _, err, _ = run(["estimate", "--model", str(tmp_path)])
    assert code == 2 and "config.json" in err, err


def test_a_growing_proc_file_is_read_bounded(run):
    # /proc files report size 0: the bounded read still stops (here the file is small and not JSON)
    code, _, err, _ = run(["estimate", "--model", "/proc/self/status"])
    assert code == 2 and "byte" in err, err


def test_out_of_process_dev_zero_under_memory_bounds():
    """A hostile config as a process: exit 2, one line, quickly, without reading the device."""
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--model", "/dev/zero"], capture_output=True,
                       text=True, timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert time.monotonic() - start < 10
