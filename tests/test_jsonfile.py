"""The generic bounded JSON reader (symbolic/jsonfile.py) with bounds and errors of its caller's own."""
from __future__ import annotations

import os

import pytest

from symbolic import jsonfile

B = jsonfile.Bounds(max_bytes=64, max_depth=2, max_digits=5, name="data.json", typical="tiny", nests=1)


class Refused(Exception):
    pass


def error(path, field, message):
    return Refused(f"{field}: {message}")


def read(tmp_path, text):
    p = tmp_path / "data.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    raw, path = jsonfile.read_raw(str(tmp_path), B, error)  # a directory: its data.json
    return jsonfile.parse(raw, path, B, error)


def test_a_file_within_bounds_is_its_object(tmp_path):
    assert read(tmp_path, '\ufeff{"a": [1, 2], "b": 12345}') == {"a": [1, 2], "b": 12345}


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "a": 2}', "a: field 'a' appears twice"),
    ('{"a": 123456}', "json: a number of 6 digits at byte 6: no config field has more than 5"),
    # the same digits earlier inside a string or a float are not the number refused
    ('{"x": "123456", "y": 123456.5, "a": 123456}', "json: a number of 6 digits at byte 36: no config field"),
    ('{"a": [[1]]}', "json: nested deeper than 2 levels at byte 7 (a data.json nests 1 levels)"),
    ('[1]', "json: a data.json holds a JSON object, got array"),
    ('{"a": ' + "1" * 70 + "}", "file: is 77 bytes; a data.json is tiny (limit 64 bytes)"),
    (b'\xff\xfe{}', "json: is UTF-16"),
    (b'{"a": "\xff"}', "json: not a UTF-8 JSON file (invalid start byte at byte 7)"),
])
def test_what_exceeds_the_bounds_is_refused_by_the_callers_error(tmp_path, text, message):
    with pytest.raises(Refused, match=message.replace("(", r"\(").replace(")", r"\)")):
        read(tmp_path, text)


def test_a_fifo_is_named_and_never_opened(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(Refused, match="is a FIFO \\(named pipe\\), not a data.json file"):
        jsonfile.read_bounded(str(fifo), B, error)
