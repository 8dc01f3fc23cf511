"""Catalog overlays against large and hostile files: what calibrate writes reads back value for
value (a property test over names and text with odd characters), 5,000 entries load in one
pass over the text, the entry count is bounded, every number is checked, and text from the file
reaches the terminal escaped."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardmeter.calibrate.overlay_out import overlay_text
from shardmeter.errors import ScenarioError
from shardmeter.resolve import overlay as ov_mod
from shardmeter.resolve.overlay import overlay_notes, read_overlay
from shardmeter.tables import safe_text

#: Text as a file or the command line may give it: any Unicode scalar (controls, DEL, quotes,
#: backslashes, bidirectional overrides, astral characters), no lone surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
NAME = TEXT.filter(bool)
FINITE = st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=NAME,
    source=TEXT,
    lat=FINITE,
    eff=st.floats(min_value=0.01, max_value=1.0),
    files=st.lists(TEXT, max_size=3),
    rows=st.integers(min_value=0, max_value=10**6),
)
def test_what_calibrate_writes_reads_back_value_for_value(tmp_path, name, source, lat, eff, files, rows):
    link = {"name": name, "latency_us": lat, "efficiency": eff, "source": source}
    gpu = {"name": name + "-gpu", "matmul_efficiency": eff}
    coll = {
        "link": name,
        "collective": "all_gather",
        "algorithm": source,
        "latency_us": lat,
        "bandwidth_gb_s": lat * 2,
        "rows": rows,
        "logs": files,
        "applied": True,
        "source": source,
    }
    prov = {
        "tool": "shardmeter calibrate 0",
        "date": source,
        "inputs": [{"file": f, "sha256": "ab"} for f in files],
    }
    path = tmp_path / "cal.toml"
    path.write_text(
        overlay_text([("link", link), ("gpu", gpu), ("collective", coll)], prov, source), encoding="utf-8"
    )
    ov = read_overlay(str(path))
    (lk, gp) = ov.entries
    assert (lk.kind, lk.name, dict(lk.fields)) == (
        "interconnect",
        name,
        {k: v for k, v in link.items() if k != "name"},
    )
    assert (gp.name, gp.fields["matmul_efficiency"]) == (name + "-gpu", eff)
    assert dict(ov.collectives[0].fields) == coll


def _many(n: int) -> str:
    return "".join(
        f'[[link]]\nname = "l{i}"\nkind = "network"\nbandwidth_gb_s = {10 + i % 7}.0\nlatency_us = 3.0\n\n'
        for i in range(n)
    )


def test_5000_entries_load_in_one_pass(tmp_path, monkeypatch):
    """Each entry's line came from rescanning the file (5,000 entries: about a minute); now
    one pass finds every header. Counted, and timed with a generous CPU bound."""
    path = tmp_path / "big.toml"
    path.write_text(_many(5000), encoding="utf-8")
    calls = []
    real = getattr(ov_mod, "_header_lines", None)
    if real is not None:
        monkeypatch.setattr(ov_mod, "_header_lines", lambda text: calls.append(1) or real(text))
    t0 = time.process_time()
    ov = read_overlay(str(path))
    cpu = time.process_time() - t0
    assert len(ov.entries) == 5000 and ov.entries[-1].line == 6 * 4999 + 1
    assert calls == [1]
    assert cpu < 2.0, f"{cpu:.2f} s of CPU for 5,000 entries"


def test_the_entry_count_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(ov_mod, "MAX_ENTRIES", 100, raising=False)
    path = tmp_path / "big.toml"
    path.write_text(_many(101), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"big.toml: 101 entries; an overlay holds at most 100$"):
        read_overlay(str(path))


@pytest.mark.parametrize("value", ["inf", "nan", "1e999"])
def test_every_number_is_checked(tmp_path, value):
    path = tmp_path / "cal.toml"
    path.write_text(f'[[link]]\nname = "nvlink4"\nlatency_us = {value}\n', encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"cal.toml:1: \$\.link\[0\]\.latency_us: .*not a finite number"):
        read_overlay(str(path))


def test_an_unknown_key_with_escape_sequences_is_escaped(tmp_path):
    path = tmp_path / "cal.toml"
    path.write_text('[[gpu]]\nname = "h100-sxm"\n"\\u001b[2Jmatmul" = 0.5\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as exc:
        read_overlay(str(path))
    msg = str(exc.value)
    assert "\x1b" not in msg and msg == f"{path}:3: $.gpu[0].\\x1b[2Jmatmul: unknown field of HardwareProfile"


def test_an_unknown_table_with_escape_sequences_is_escaped(tmp_path):
    path = tmp_path / "cal.toml"
    path.write_text('["\\u001b]0;x\\u0007"]\na = 1\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as exc:
        read_overlay(str(path))
    assert "\x1b" not in str(exc.value) and "\\x1b]0;x\\x07" in str(exc.value)


def test_notes_escape_names_and_sources(tmp_path):
    path = tmp_path / "cal.toml"
    path.write_text(
        '[[gpu]]\nname = "h100-sxm"\nmatmul_efficiency = 0.5\nsource = "fit \\u001b[31mred\\nline"\n',
        encoding="utf-8",
    )
    (note,) = overlay_notes([read_overlay(str(path))], {"hardware": {"h100-sxm"}})
    assert "\x1b" not in note and "\n" not in note and "fit \\x1b[31mred\\nline" in note


def test_safe_text_escapes_what_a_terminal_would_act_on():
    assert safe_text("ok é 😀") == "ok é 😀"
    assert safe_text("a\x1b[31mb\x07\r\n\t\u202e\x7f") == "a\\x1b[31mb\\x07\\r\\n\\t\\u202e\\x7f"
    assert safe_text("x" * 300, limit=10) == "xxxxxxx..."
