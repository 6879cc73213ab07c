import gzip
import json

import pytest

from tb_attention_plugin.trace import reader
from tb_attention_plugin.trace.reader import TraceReadError, TraceTruncated, read_trace


def _collect(path, **kw):
    out = []
    meta, stats = read_trace(str(path), out.extend, **kw)
    return meta, stats, out


EV = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.0, "args": {"correlation": 3}}


def test_object_with_keys_before_and_after_events(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": "X"}],
                "traceEvents": [EV, EV],
                "traceName": "n",
                "baseTimeNanoseconds": 5,
            }
        )
    )
    meta, stats, evs = _collect(p)
    assert len(evs) == 2 and evs[0].name == "k" and evs[0].ts == 1.5
    assert meta["traceName"] == "n" and meta["deviceProperties"][0]["name"] == "X"
    assert evs[0].args.correlation == 3


def test_bare_list_and_gzip_multi_member(tmp_path):
    p = tmp_path / "t.json.gz"
    body = json.dumps([EV] * 3).encode()
    with open(p, "wb") as f:  # two gzip members, as concatenating .gz files produces
        f.write(gzip.compress(body[:20]))
        f.write(gzip.compress(body[20:]))
    _, _, evs = _collect(p)
    assert len(evs) == 3


def test_gzip_sniffed_by_magic_not_name(tmp_path):
    p = tmp_path / "plain.json.gz"
    p.write_text(json.dumps({"traceEvents": [EV]}))
    assert len(_collect(p)[2]) == 1


def test_chunks_split_at_boundaries_even_with_braces_in_names(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_TARGET", 64)
    monkeypatch.setattr(reader, "BLOCK", 50)
    evs = [dict(EV, name=f"lambda()#{i}}},{{x" if i % 2 else f"k{i}") for i in range(200)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))  # one line, no newlines
    _, _, out = _collect(p)
    assert [e.name for e in out] == [e["name"] for e in evs]


def test_minified_and_pretty_give_the_same_events(tmp_path):
    evs = [dict(EV, ts=float(i)) for i in range(1000)]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"traceEvents": evs}, separators=(",", ":")))
    b.write_text(json.dumps({"traceEvents": evs}, indent=4))
    assert [e.ts for e in _collect(a)[2]] == [e.ts for e in _collect(b)[2]]


def test_wrong_types_are_coerced_not_fatal(tmp_path):
    bad = [dict(EV, dur="3.5"), dict(EV, ts=None), dict(EV, args=[1, 2]), 42, dict(EV, pid=[1])]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": bad}))
    _, stats, evs = _collect(p)
    assert evs[0].dur == 3.5
    assert evs[1].ts != evs[1].ts  # NaN: no timestamp
    assert stats.get("skipped") == 1


def test_nan_and_invalid_utf8_are_repaired(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(
        b'{"traceEvents": [{"ph": "X", "name": "a\xff\xfeb", "ts": NaN, "dur": 1}, '
        b'{"ph": "X", "name": "ok", "ts": 2, "dur": Infinity}]}'
    )
    _, _, evs = _collect(p)
    assert evs[0].name.startswith("a") and evs[0].ts != evs[0].ts
    assert evs[1].name == "ok" and evs[1].dur == 0.0


@pytest.mark.parametrize(
    "content,msg",
    [
        (b"", "empty"),
        (b"hello world", "not a JSON trace"),
        (b'{"foo": 1}', "traceEvents"),
        (b'{"traceEvents": 5}', "not a list"),
    ],
)
def test_bad_files_have_one_line_errors(tmp_path, content, msg):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    with pytest.raises(TraceReadError) as e:
        _collect(p)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_truncated_json_keeps_complete_events(tmp_path):
    p = tmp_path / "t.json"
    text = json.dumps({"traceEvents": [dict(EV, ts=float(i)) for i in range(50)]}, indent=1)
    p.write_text(text[: len(text) * 2 // 3])
    out = []
    with pytest.raises(TraceTruncated):
        read_trace(str(p), out.extend)
    assert 10 < len(out) < 50


def test_truncated_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    blob = gzip.compress(json.dumps({"traceEvents": [EV] * 500}).encode())
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(TraceTruncated):
        _collect(p)


def test_corrupt_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00garbage" * 10)
    with pytest.raises(TraceReadError):
        _collect(p)


def test_decompressed_size_cap(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": [EV] * 20000}).encode()))
    with pytest.raises(TraceReadError) as e:
        _collect(p, max_bytes=100_000)
    assert "exceeds the limit" in str(e.value)


def test_one_huge_string_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_EVENT_BYTES", 1 << 16)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [dict(EV, name="x" * 200_000)]}))
    with pytest.raises(TraceReadError) as e:
        _collect(p)
    assert "larger than" in str(e.value) or "longer than" in str(e.value)


def test_deep_nesting_does_not_crash(tmp_path):
    p = tmp_path / "t.json"
    deep = "[" * 200_000 + "]" * 200_000
    p.write_text('{"traceEvents": [' + json.dumps(EV) + ', {"ph": "X", "args": ' + deep + "}]}")
    try:
        _, _, evs = _collect(p)
    except TraceReadError:
        return
    assert evs[0].name == "k"


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(TraceReadError):
        _collect(tmp_path)
    with pytest.raises(TraceReadError):
        _collect(tmp_path / "nope.json")
