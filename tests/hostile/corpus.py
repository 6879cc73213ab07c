"""A corpus of broken, partial and hostile trace files.

    from hostile.corpus import build
    cases = build("/tmp/hostile")          # -> list[Case], files written under /tmp/hostile

    python tests/hostile/corpus.py OUTDIR  # the same from the command line; prints a table

Every case lives in its own directory ``OUTDIR/<case name>/`` (one TensorBoard *run* per case),
so the same tree serves the CLI tests (one subprocess per file), the plugin tests (one run per
case, next to good runs) and ``docs/robustness.md``. Each :class:`Case` says what must happen:

* ``cli``: ``"ok"`` (analysed, exit 0), ``"warn"`` (analysed, exit 0, with a warning about what
  was skipped or repaired) or ``"error"`` (exit 2 and one ``error: <file>: <problem>`` line);
* ``problem``: a regex the problem (or the warning, for ``"warn"``) must match;
* ``plugin``: ``"ready"``, ``"error"`` (the run is listed with its message), ``"incomplete"`` (a
  truncated file: listed with its message, never as a CPU-only trace) or ``"absent"`` (not a trace
  file: not listed at all).

Nothing here materialises a big buffer: the gzip bombs are built from one compressed block
repeated (full-flush deflate blocks are position independent), so a 2 GiB bomb is ~2 MB on disk
and takes about a second to write. Traces that must *change* while they are read (growing,
deleted mid-load) are made by the tests themselves.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAMPLE = os.path.join(ROOT, "sample_traces", "naive_bf16_s2048_fwd")
XSS = "<img src=x onerror=window.__xss=1>"
XSS_SCRIPT = "</script><script>window.__xss=2</script>"
GIB = 1 << 30


@dataclass
class Case:
    name: str  # also the run directory
    rel: str  # path of the input, relative to OUTDIR
    what: str  # a short description (docs/robustness.md)
    cli: str  # "ok" | "warn" | "error"
    problem: Optional[str]  # regex on the error line's problem, or on a warning ("warn")
    plugin: str  # "ready" | "error" | "absent"
    slow: bool = False  # big decompressed size: CLI tests give it a lower --max-bytes too


def sample_events() -> dict:
    """The smallest sample trace (eager attention, bf16, S=2048 on an H200), decoded."""
    name = sorted(f for f in os.listdir(SAMPLE) if f.endswith((".json", ".json.gz")))[0]
    with gzip.open(os.path.join(SAMPLE, name), "rt", encoding="utf-8") as f:
        return json.load(f)


def _dump(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _gzip_header() -> bytes:
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def write_bomb(path: str, head: bytes, block: bytes, repeat: int, tail: bytes) -> int:
    """gzip of ``head + block * repeat + tail`` without ever holding more than one block.

    ``block`` is deflated once after a full flush; its compressed bytes do not depend on what came
    before, so they are written ``repeat`` times. The CRC is computed block by block. Returns the
    decompressed size."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    assert piece == again, "deflate output of a block after a full flush is not position independent"
    last = c.compress(tail) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(repeat):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    total = len(head) + len(block) * repeat + len(tail)
    with open(path, "wb") as f:
        f.write(_gzip_header())
        f.write(first)
        for _ in range(repeat):
            f.write(piece)
        f.write(last)
        f.write(struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF))
    return total


def with_raw(data: dict, raw: bytes) -> bytes:
    """The trace with ``raw`` (bytes, not necessarily valid JSON) as an event in the middle of its list."""
    evs = list(data["traceEvents"])
    evs.insert(len(evs) // 2, "__RAW_EVENT__")
    out = _dump(dict(data, traceEvents=evs))
    assert out.count(b'"__RAW_EVENT__"') == 1
    return out.replace(b'"__RAW_EVENT__"', raw)


def _events_with(data: dict, fn) -> dict:
    out = dict(data)
    out["traceEvents"] = [fn(dict(e)) if isinstance(e, dict) else e for e in data["traceEvents"]]
    return out


def write_tiny_traces(d: str, n: int) -> None:
    """``n`` traces of one kernel each in directory ``d`` (one worker each, as n ranks would)."""
    os.makedirs(d, exist_ok=True)
    tiny = _dump(
        {
            "traceEvents": [
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "k",
                    "pid": 0,
                    "tid": 7,
                    "ts": 1,
                    "dur": 1,
                    "args": {"device": 0, "stream": 7, "correlation": 1},
                }
            ]
        }
    )
    for i in range(n):
        with open(os.path.join(d, f"w{i:05d}.{i + 1}.pt.trace.json"), "wb") as f:
            f.write(tiny)


def build(outdir: str, tiny_traces: int = 2000, bombs: bool = True) -> list[Case]:
    """Write the corpus under ``outdir``; returns the cases in a stable order."""
    os.makedirs(outdir, exist_ok=True)
    data = sample_events()
    good = _dump(data)
    cases: list[Case] = []
    rnd = random.Random(1234)

    def put(
        name: str,
        fname: str,
        content: bytes,
        what: str,
        cli: str,
        problem: Optional[str],
        plugin: Optional[str] = None,
        gz: bool = False,
        slow: bool = False,
    ) -> Case:
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, fname)
        with open(p, "wb") as f:
            f.write(gzip.compress(content, 6, mtime=0) if gz else content)
        c = Case(
            name,
            f"{name}/{fname}",
            what,
            cli,
            problem,
            plugin or {"ok": "ready", "warn": "ready", "error": "error"}[cli],
            slow,
        )
        cases.append(c)
        return c

    T = "w.1.pt.trace.json"  # a name tensorboard_trace_handler could have written

    # --- a control: the sample itself
    put("good", T + ".gz", good, "a valid trace (control)", "ok", None, gz=True)

    # --- empty, truncated, not gzip, junk
    put("empty", T, b"", "empty file", "error", r"file is empty")
    # a truncated trace is an error (exit 2; --allow-partial analyses the prefix), "incomplete" in the plugin
    put(
        "truncated_json",
        T,
        good[: len(good) * 17 // 20],
        "JSON cut at 85%, among the GPU kernels (a trace still being written)",
        "error",
        r"^truncated: file ends early .*--allow-partial",
        plugin="incomplete",
    )
    put("truncated_json_head", T, good[:40], "JSON cut before the first event", "error", r"ends early|not a complete")
    gz = gzip.compress(good, 6, mtime=0)
    put(
        "truncated_gzip",
        T + ".gz",
        gz[: len(gz) // 2],
        "gzip cut in half",
        "error",
        r"^truncated: .*--allow-partial",
        plugin="incomplete",
    )
    put(
        "truncated_gzip_header",
        T + ".gz",
        gz[:5],
        "gzip cut inside its header",
        "error",
        r"^truncated: file ends early",
        plugin="incomplete",
    )
    put(
        "gz_plain_text",
        T + ".gz",
        b"this is not gzip, just text\n",
        "a .gz that is plain text",
        "error",
        r"not a JSON trace",
    )
    put(
        "gz_binary_junk",
        T + ".gz",
        bytes(rnd.randrange(256) for _ in range(4096)),
        "binary junk named .json.gz",
        "error",
        r"not a JSON trace|corrupt gzip",
    )
    put(
        "gz_corrupt_body",
        T + ".gz",
        gz[:20] + bytes(rnd.randrange(256) for _ in range(2000)) + gz[2020:],
        "gzip with a corrupt deflate stream",
        "error",
        r"corrupt gzip|malformed|not a complete|ends early",
        plugin="error",
    )
    put(
        "random_bytes",
        T,
        bytes(rnd.randrange(256) for _ in range(65536)),
        "64 KiB of random bytes",
        "error",
        r"not a JSON trace",
    )
    put(
        "random_bytes_brace",
        T,
        b"{" + bytes(rnd.randrange(256) for _ in range(65536)),
        "random bytes after a '{'",
        "error",
        r"malformed JSON|ends early|not a complete",
    )

    # --- valid JSON that is not a trace
    put(
        "json_object",
        T,
        b'{"foo": 1, "bar": [1, 2, 3]}',
        "a JSON object without traceEvents",
        "error",
        r'no "traceEvents"',
    )
    put("json_number", T, b"42", "a JSON number", "error", r"not a JSON trace")
    put("json_string", T, b'"traceEvents"', "a JSON string", "error", r"not a JSON trace")
    put("json_null", T, b"null", "JSON null", "error", r"not a JSON trace")
    put(
        "json_list_of_numbers", T, b"[1, 2, 3]", "a list of numbers", "error", r"no trace events: none of the 3 entries"
    )
    for name, v in (("events_number", 5), ("events_string", '"abc"'), ("events_object", "{}"), ("events_null", "null")):
        put(
            name,
            T,
            b'{"traceEvents": ' + str(v).encode() + b"}",
            f"traceEvents is {v}",
            "error",
            r'"traceEvents" is not a list',
        )
    put("events_empty_list", T, b'{"traceEvents": []}', "traceEvents is empty (analysed: nothing in it)", "ok", None)

    # --- deep nesting
    deep = 200_000
    put("deep_top", T, b"[" * deep + b"]" * deep, "200k nested lists as the whole file", "error", r"no trace events")
    put(
        "deep_in_args",
        T,
        with_raw(data, b'{"ph":"X","name":"deep","ts":1,"dur":1,"args":' + b"[" * deep + b"]" * deep + b"}"),
        "an event whose args nest 200k lists (in the middle of the events)",
        "warn",
        r"nested too deeply to decode and were skipped",
    )
    put(
        "deep_item",
        T,
        b'{"traceEvents":[' + b"[" * deep + b"]" * deep + b"]}",
        "200k nested lists as an entry of traceEvents",
        "error",
        r"no trace events",
    )
    put(
        "deep_unclosed",
        T,
        b'{"traceEvents":[{"args":' + b'{"a":' * deep,
        "200k unclosed objects",
        "error",
        r"ends early|not a complete|nested",
    )
    put(
        "deep_metadata",
        T,
        b'{"x":' + b"[" * deep + b"]" * deep + b"," + good[1:],
        "200k nested lists in a metadata key before traceEvents",
        "ok",
        None,
    )

    # --- strange values
    bad_utf8 = good.replace(b'"name":"', b'"name":"\xff\xfe\xc3(', 50)
    put("invalid_utf8", T, bad_utf8, "invalid UTF-8 in names", "warn", r"invalid UTF-8")
    nan = good.replace(b'"dur":', b'"dur":NaN,"x":', 20).replace(b'"ts":', b'"ts":Infinity,"y":', 5)
    put("nan_infinity", T, nan, "NaN and Infinity as ts / dur", "warn", r"NaN/Infinity")
    big = _events_with(data, lambda e: dict(e, pid=2**70) if e.get("ph") == "X" else e)
    big["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "huge",
            "pid": 2**80,
            "tid": -(2**90),
            "ts": 10**30,
            "dur": 10**25,
            "args": {
                "correlation": 2**100,
                "grid": [2**64, 1, 1],
                "External id": -(2**70),
                "stream": 2**65,
                "device": 2**40,
            },
        }
    )
    put(
        "huge_integers",
        T,
        _dump(big),
        "integers beyond int64 (pid, tid, ts, correlation, grid)",
        "warn",
        r"1 events had a timestamp or duration out of range",
    )
    huge_ts = _events_with(data, lambda e: e)
    huge_ts["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "far",
            "pid": 0,
            "tid": 7,
            "ts": 1e300,
            "dur": 1e300,
            "args": {"correlation": 1, "device": 0, "stream": 7},
        }
    )
    put(
        "huge_floats",
        T,
        _dump(huge_ts),
        "a kernel at ts=1e300 with dur=1e300",
        "warn",
        r"1 events had a timestamp or duration out of range",
    )

    def wrong(e):
        if e.get("ph") != "X":
            return e
        k = rnd.randrange(4)
        if k == 0:
            e["dur"] = str(e.get("dur"))
        elif k == 1:
            e["args"] = [1, 2]
        elif k == 2:
            e["ts"] = None
        else:
            e["name"] = {"not": "a string"}
        return e

    put(
        "wrong_types",
        T,
        _dump(_events_with(data, wrong)),
        "wrong field types (string dur, list args, null ts, object name)",
        "warn",
        r"coerced or dropped",
    )
    weird_args = _events_with(
        data,
        lambda e: (
            dict(
                e,
                args={
                    "Input Dims": "nope",
                    "Input type": 5,
                    "Concrete Inputs": {"a": 1},
                    "grid": "x",
                    "External id": "12",
                    "correlation": [1],
                },
            )
            if e.get("cat") == "cpu_op"
            else e
        ),
    )
    put(
        "wrong_arg_types",
        T,
        _dump(weird_args),
        "wrong types inside args (shapes, ids, grid)",
        "warn",
        r"coerced or dropped",
    )
    absurd = _events_with(
        data,
        lambda e: (
            dict(e, args=dict(e.get("args") or {}, **{"Input Dims": [[2**40, 2**40, 2**40], [-1, -5], [], [0, 0]]}))
            if e.get("cat") == "cpu_op"
            else e
        ),
    )
    put("absurd_shapes", T, _dump(absurd), "absurd shapes (2^40 dims, negative, empty)", "ok", None)
    put(
        "negative_dur",
        T,
        _dump(
            _events_with(
                data,
                lambda e: (
                    dict(e, dur=-abs(e["dur"]) - 1)
                    if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))
                    else e
                ),
            )
        ),
        "every duration negative",
        "warn",
        r"negative duration",
    )
    put(
        "missing_ts",
        T,
        _dump(_events_with(data, lambda e: {k: v for k, v in e.items() if k != "ts"})),
        "no event has a ts",
        "error",
        r"no usable events",
    )
    some_ts = _events_with(data, lambda e: {k: v for k, v in e.items() if k != "ts"} if rnd.random() < 0.3 else e)
    put("missing_some_ts", T, _dump(some_ts), "30% of the events without ts", "ok", None)
    shuffled = dict(data)
    shuffled["traceEvents"] = list(data["traceEvents"])
    rnd.shuffle(shuffled["traceEvents"])
    put("out_of_order", T, _dump(shuffled), "events in random order", "ok", None)
    dup = dict(data)
    dup["traceEvents"] = data["traceEvents"] * 3
    put("duplicated_events", T, _dump(dup), "every event three times (same ids, same times)", "ok", None)

    def cyc(e):
        a = e.get("args")
        if e.get("cat") == "python_function" and isinstance(a, dict):
            e = dict(e, args=dict(a, **{"Python parent id": a.get("Python id")}))
        return e

    put(
        "python_parent_cycle",
        T,
        _dump(_events_with(data, cyc)),
        "Python stack frames that are their own parents",
        "ok",
        None,
    )
    flows = dict(data)
    flows["traceEvents"] = list(data["traceEvents"]) + [
        {"ph": p, "id": 1, "pid": 0, "tid": 0, "ts": 1, "cat": c, "name": c}
        for p in ("s", "f", "s", "f")
        for c in ("fwdbwd", "ac2g")
    ]
    put("bogus_flows", T, _dump(flows), "flow events that link nothing or everything to id 1", "ok", None)
    nonlist = data["traceEvents"][:]
    nonlist[5:5] = [1, "x", None, [1, 2], True]
    put(
        "non_object_entries",
        T,
        _dump(dict(data, traceEvents=nonlist)),
        "numbers, strings, null in traceEvents",
        "warn",
        r"not event objects and were skipped",
    )
    put("bare_list", T, _dump(data["traceEvents"]), "a bare list of events (no envelope)", "ok", None)
    put("trailing_junk", T, good + b"\n\x00garbage", "junk after the closing brace", "ok", None)
    many_nulls = b'{"traceEvents":[' + b"null," * 2_000_000 + b"null]}"
    put(
        "many_non_objects",
        T,
        many_nulls,
        "2 million nulls in traceEvents (10 MB)",
        "error",
        r"no trace events: none of the 2000001 entries",
    )

    # --- names: HTML and script
    def xss(e):
        if e.get("cat") in ("kernel", "cpu_op", "python_function", "user_annotation"):
            e["name"] = (XSS if e.get("cat") == "kernel" else XSS_SCRIPT) + " " + str(e.get("name"))
        return e

    put("xss_names", T, _dump(_events_with(data, xss)), "HTML/script in kernel, op and module names", "ok", None)
    html_run = "<b>run</b><script>alert(1)</script>"
    put(
        html_run,
        "<img src=x onerror=alert(1)>.1.pt.trace.json",
        good,
        "HTML in the run directory and worker names",
        "ok",
        None,
    )
    put(
        "newline_in_name",
        "evil\n\x1b[31mred\x1b[0m.1.pt.trace.json",
        b"",
        "a newline and a terminal escape in the file name (empty file)",
        "error",
        r"file is empty",
        plugin="absent",
    )  # not a trace name to discovery (and a name no route parameter may carry)

    # --- not files
    d = os.path.join(outdir, "directory_named_trace", "x.pt.trace.json")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "readme.txt"), "w") as f:
        f.write("a directory, not a trace\n")
    cases.append(
        Case(
            "directory_named_trace",
            "directory_named_trace/x.pt.trace.json",
            "a directory named x.pt.trace.json",
            "error",
            r"no trace files found|is a directory",
            "absent",
        )
    )
    d = os.path.join(outdir, "symlink_loop")
    os.makedirs(d, exist_ok=True)
    for a, b in (("a.pt.trace.json", "b.pt.trace.json"), ("b.pt.trace.json", "a.pt.trace.json")):
        p = os.path.join(d, a)
        if not os.path.lexists(p):
            os.symlink(b, p)
    if not os.path.lexists(os.path.join(d, "loop")):
        os.symlink(".", os.path.join(d, "loop"))  # a directory loop for walkers
    cases.append(
        Case(
            "symlink_loop",
            "symlink_loop/a.pt.trace.json",
            "a symlink loop (a -> b -> a, loop -> .)",
            "error",
            r"cannot open.*(symbolic links|loop)",
            "absent",
        )
    )
    fifo = os.path.join(outdir, "fifo", T)
    os.makedirs(os.path.dirname(fifo), exist_ok=True)
    if not os.path.lexists(fifo) and hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
    cases.append(
        Case(
            "fifo",
            f"fifo/{T}",
            "a named pipe called w.1.pt.trace.json (nobody writes to it)",
            "error",
            r"not a regular file",
            "absent",
        )
    )

    # --- bombs
    if bombs:
        p = os.path.join(outdir, "gzip_bomb_string", T + ".gz")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        write_bomb(
            p, b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"', b"A" * (1 << 20), 2048, b'","ts":1,"dur":1}]}'
        )
        cases.append(
            Case(
                "gzip_bomb_string",
                f"gzip_bomb_string/{T}.gz",
                "gzip bomb: one 2 GiB string in a 2 MB .gz",
                "error",
                r"larger than 64 MiB|exceeds the limit",
                "error",
            )
        )
        ev = (
            json.dumps(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ampere_bf16_gemm",
                    "pid": 0,
                    "tid": 7,
                    "ts": 1.0,
                    "dur": 2.0,
                    "args": {"correlation": 1, "device": 0, "stream": 7},
                },
                separators=(",", ":"),
            ).encode()
            + b","
        )
        block = ev * ((1 << 20) // len(ev))
        p = os.path.join(outdir, "gzip_bomb_events", T + ".gz")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        n = write_bomb(p, b'{"traceEvents":[', block, 4 * 1024, ev[:-1] + b"]}")
        cases.append(
            Case(
                "gzip_bomb_events",
                f"gzip_bomb_events/{T}.gz",
                f"gzip bomb: {n / GIB:.0f} GiB of valid events in a {os.path.getsize(p) / 1e6:.0f} MB .gz",
                "error",
                r"decompressed size exceeds the limit",
                "error",
                slow=True,
            )
        )

    # --- thousands of tiny traces in one run
    if tiny_traces:
        write_tiny_traces(os.path.join(outdir, "many_tiny"), tiny_traces)
        cases.append(
            Case("many_tiny", "many_tiny", f"{tiny_traces} tiny traces in one run directory", "ok", None, "ready")
        )
    return cases


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/hostile/corpus.py OUTDIR", file=sys.stderr)
        return 2
    cases = build(argv[0])
    w = max(len(c.name) for c in cases)
    for c in cases:
        print(f"{c.name:<{w}}  cli={c.cli:<5}  plugin={c.plugin:<6}  {c.what}")
    print(f"{len(cases)} cases under {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
