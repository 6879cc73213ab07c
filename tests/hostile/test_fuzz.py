"""Mutation fuzzing of the reader and the whole engine: small traces with bytes flipped,
dropped, duplicated or replaced by JSON's structural characters. Each input must finish within
a time limit with a report or a TraceReadError - never hang, never raise anything else.

(It found a reader loop: a stray ``}`` where an entry of traceEvents should start was skipped as
an empty literal forever.) Deterministic seeds; ``TB_ATTENTION_FUZZ_N`` runs more cases.
"""

from __future__ import annotations

import json
import os
import random
import signal

import pytest

from tb_attention_plugin.analyze import analyze_path
from tb_attention_plugin.trace.reader import TraceReadError, read_trace

N = int(os.environ.get("TB_ATTENTION_FUZZ_N", "400"))
LIMIT_S = 5.0
STRUCT = b'{}[],:"\\ \n0-eE.tfn'


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def _base() -> bytes:
    evs = []
    for i in range(12):
        ts = 100.0 + 10 * i
        evs += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::bmm" if i % 3 != 1 else "aten::softmax",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 5,
                "args": {
                    "External id": i + 1,
                    "Input Dims": [[8, 128, 64], [8, 64, 128]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i + 1, "External id": i + 1},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kern{i}",
                "pid": 0,
                "tid": 7,
                "ts": ts + 3,
                "dur": 4,
                "args": {"correlation": i + 1, "External id": i + 1, "device": 0, "stream": 7, "grid": [1, 1, 1]},
            },
            {"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": ts, "cat": "fwdbwd", "name": "fwdbwd"},
        ]
    return json.dumps(
        {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
            "traceEvents": evs,
            "traceName": "x",
        },
        indent=1,
    ).encode()


def _mutate(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rnd.choice([1, 1, 2, 3, 8])):
        k = rnd.randrange(6)
        i = rnd.randrange(len(b))
        if k == 0:
            b[i] = rnd.randrange(256)
        elif k == 1:
            b[i] = rnd.choice(STRUCT)
        elif k == 2:
            del b[i : i + rnd.randrange(1, 40)]
        elif k == 3:
            j = rnd.randrange(len(b))
            b[i:i] = b[j : j + rnd.randrange(1, 60)]
        elif k == 4:
            b[i:i] = bytes(rnd.choice(STRUCT) for _ in range(rnd.randrange(1, 6)))
        else:
            b = b[:i]
        if not b:
            break
    return bytes(b)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")
def test_mutated_traces_never_hang_or_raise(tmp_path):
    rnd = random.Random(20261130)
    base = _base()
    old = signal.signal(signal.SIGALRM, _alarm)
    outcomes = {"ok": 0, "error": 0}
    try:
        for n in range(N):
            data = _mutate(base, rnd)
            p = tmp_path / f"f{n % 8}.json"
            p.write_bytes(data)
            signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
            try:
                try:
                    read_trace(str(p), lambda evs: None)
                except TraceReadError as e:
                    assert "\n" not in str(e)
                rep = analyze_path(str(p))
            except Hang:
                pytest.fail(f"case {n} took more than {LIMIT_S} s: {data[:300]!r}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert rep["status"] in ("ok", "error"), rep
            if rep["status"] == "error":
                assert not rep["error"].startswith("internal error"), (n, rep["error"], data[:300])
                assert "\n" not in rep["error"]
            outcomes[rep["status"]] += 1
    finally:
        signal.signal(signal.SIGALRM, old)
    print(f"fuzz: {N} mutated traces: {outcomes}")
    assert outcomes["ok"] and outcomes["error"]
