"""The kernel table's JSON path (KernelTable.encodable_chunks, written by jsonout.iter_trace_body)
must give the bytes of encoding its row dicts (KernelTable.rows), whatever the columns hold: the
few-valued runs it pre-encodes must neither merge values that encode differently (-0.0 and 0.0,
1 and 1.0, True and 1) nor reorder keys."""

from __future__ import annotations

import numpy as np
import pytest

from tb_attention_plugin import jsonout
from tb_attention_plugin.table import FIELDS, Coded, KernelTable


def _table(n: int, seed: int) -> KernelTable:
    rng = np.random.default_rng(seed)
    few = np.array([0.0, -0.0, np.nan, 1.5, 1e300, 3.0])
    cols: dict = {
        "id": np.arange(n, dtype=np.int64),
        "name": Coded(rng.integers(-1, 4, n), ["a", 'q"uote', None, "é"]),  # -1 reads the last entry
        "kind": Coded(rng.integers(0, 2, n), ["kernel", "memcpy"]),
        "ts": rng.random(n) * 1e6,  # many values
        "dur_us": few[rng.integers(0, len(few), n)],
        "device": rng.integers(0, 2, n).astype(np.int64),
        "stream": rng.integers(0, 3, n).astype(np.int64),
        "step": Coded(rng.integers(0, 40, n), [f"s{i}" for i in range(39)] + [None]),
        "attention": rng.random(n) < 0.5,
        "phase": Coded(rng.integers(0, 3, n), [np.int64(7), 2.0, None]),  # a numpy scalar entry: the hook's
        "instance": np.where(rng.random(n) < 0.5, rng.integers(0, n, n), np.nan).astype(np.float64),
        "flops": np.round(rng.random(n) * 4, 1) * 1e9,
        "grid": Coded(rng.integers(0, 3, n), [[1, 2, 3], [4, 1, 1], None]),
        "upper_bound": rng.random(n) < 0.1,
        "measured": [None if i % 3 else {"sm": i} for i in range(n)],
    }
    extras = {i: {"shapes": [[i, 2]], "source": {"line": i}} for i in range(0, n, 7)}
    extras.update({i: {"cost_detail": {"m": 1}} for i in range(3, n, 11)})
    assert set(cols) <= set(FIELDS)
    return KernelTable(cols, extras)


@pytest.mark.parametrize("n,chunk", [(0, 4), (1, 4), (37, 5), (2000, 256), (5000, 4096)])
def test_chunks_encode_as_the_rows_do(n: int, chunk: int) -> None:
    t = _table(n, n)
    enc = jsonout._ENCODER.encode
    got = b",".join(enc(c)[1:-1] for c in t.encodable_chunks(chunk, enc))
    want = enc(t.rows(slice(0, n)))[1:-1]
    assert got == want


def test_the_writer_gives_the_rows_json() -> None:
    t = _table(3000, 1)
    body = b"".join(jsonout.iter_trace_body({"path": "x", "status": "ok", "kernels": t}))
    assert body == b'"status":"ok","kernels":' + jsonout._ENCODER.encode(t.rows(slice(0, 3000))) + b"}"


def test_codes_and_num_whatever_the_column_holds():
    """KernelTable.codes and .num, the whole-array views the model, the boundary and the sources
    group by: a coded column's own codes, a list column coded in order of first appearance, a
    missing column code 0 of [None] (codes) or NaN (num)."""
    kt = KernelTable(
        {
            "id": np.arange(4, dtype=np.int64),
            "phase": Coded(np.array([2, 0, 2, 1]), ["softmax", "mask", "qk_matmul"]),
            "scope": ["b", None, "a", "b"],
            "dur_us": np.array([1.0, np.nan, 3.0, 4.0]),
            "device": np.array([0, 1, 1, 0], dtype=np.int64),
        }
    )
    codes, vocab = kt.codes("phase")
    assert codes.tolist() == [2, 0, 2, 1] and vocab == ["softmax", "mask", "qk_matmul"]
    codes, vocab = kt.codes("scope")
    assert codes.tolist() == [0, 1, 2, 0] and vocab == ["b", None, "a"]
    codes, vocab = kt.codes("cost_op")
    assert codes.tolist() == [0, 0, 0, 0] and vocab == [None]
    dur = kt.num("dur_us")
    assert dur.dtype == np.float64 and np.array_equal(dur, [1.0, np.nan, 3.0, 4.0], equal_nan=True)
    dur[0] = 9.0  # a copy: the table's column is not changed
    assert kt.columns["dur_us"][0] == 1.0
    assert kt.num("device").tolist() == [0.0, 1.0, 1.0, 0.0]
    assert np.isnan(kt.num("scope")).all() and np.isnan(kt.num("bytes")).all()
