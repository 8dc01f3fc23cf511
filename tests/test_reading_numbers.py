"""The one reader of input files and the one number check (shardmeter/reading.py, numbers.py)."""

from __future__ import annotations

import os
import time

import pytest

from shardmeter.numbers import NumberError, check_number, parse_number
from shardmeter.reading import InputError, read_input


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is not a regular file \\(a FIFO\\); give a calibration log"):
        read_input(fifo, what="calibration log")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xfea\x00", "UTF-16 text"),
        (b"a = 1\n\xe9t\xe9\n", "not a UTF-8 text file \\(byte 6 is not UTF-8\\)"),
        (b"a\x00b", "contains NUL bytes"),
    ],
)
def test_text_that_is_not_utf8_is_one_line_naming_the_file(tmp_path, raw, message):
    f = tmp_path / "x.toml"
    f.write_bytes(raw)
    with pytest.raises(InputError, match=message) as exc:
        read_input(f)
    assert str(exc.value).startswith(str(f)) and "\n" not in str(exc.value)


def test_missing_directory_and_oversized_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_input(tmp_path / "nope")
    with pytest.raises(InputError, match="is a directory"):
        read_input(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="is 101 bytes; a file is at most 100"):
        read_input(big, max_bytes=100)


def test_a_byte_order_mark_is_dropped(tmp_path):
    f = tmp_path / "bom.toml"
    f.write_bytes(b"\xef\xbb\xbfa = 1\n")
    assert read_input(f).text == "a = 1\n"


def test_line_numbers_by_offset():
    from shardmeter.reading import InputText

    t = InputText("a\nbb\n\nccc", "x")
    assert [t.line_of(i) for i in (0, 1, 2, 4, 5, 6, 8, 99)] == [1, 1, 2, 2, 3, 4, 4, 4]
    assert t.lines == 4


def test_line_numbers_of_many_entries_cost_no_rescan():
    """Naming the line of each of 50,000 entries is bisection, not a rescan per entry (which
    would be 50,000 x 1 MB of text): far under a second."""
    from shardmeter.reading import InputText

    text = "".join(f"[[gpu]]\nname = 'g{i}'\n" for i in range(50_000))
    t = InputText(text, "overlay.toml")
    offsets = [m for m in range(0, len(text), len(text) // 50_000)]
    start = time.process_time()
    lines = [t.line_of(o) for o in offsets]
    assert time.process_time() - start < 1.0
    assert lines == sorted(lines) and lines[-1] <= t.lines


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        pytest.param(10**400, {"integer": True}, "1.00000e\\+400 is beyond", id="int-beyond-float-range"),
        (float("nan"), {}, "nan is not a finite number"),
        (float("inf"), {}, "inf is not a finite number"),
        (1e300, {}, "beyond 1e\\+18 in magnitude"),
        (2.5, {"integer": True}, "expected an integer, got 2.5"),
        (True, {}, "expected a number, got bool"),
        ("²", {"integer": True}, "expected an integer in ASCII digits"),
        ("٣٢", {"integer": True}, "expected an integer in ASCII digits"),
        ("1e9", {"integer": True}, "expected an integer in ASCII digits"),
        ("9" * 30, {"integer": True}, "is too large"),
        ("nan", {}, "expected a number in ASCII digits"),
        (0, {"integer": True, "minimum": 1}, "0 is below 1"),
        (-0.5, {"minimum": 0.0}, "-0.5 is below 0"),
    ],
)
def test_a_bad_number_names_the_file_field_and_key(value, kwargs, message):
    with pytest.raises(NumberError, match=message) as exc:
        check_number(value, field="--num-layers", file="train.sh", key="model.layers", **kwargs)
    assert str(exc.value).startswith("train.sh: --num-layers (scenario key model.layers): ")


def test_good_numbers_come_back_as_python_numbers():
    assert check_number("32", field="f", integer=True) == 32 and isinstance(
        check_number(32.0, field="f", integer=True), int
    )
    assert check_number("1_024", field="f", integer=True) == 1024
    assert check_number("2.5e-3", field="f") == 0.0025 and check_number(3, field="f") == 3.0
    assert parse_number("-1", integer=True, field="f") == -1
