import numpy as np

from synth import SynthTrace, naive_attention
from tb_attention_plugin.trace.arrays import lexorder, unique_ints
from tb_attention_plugin.trace.correlate import link
from tb_attention_plugin.trace.records import LAUNCH, load_trace


def _name(tr, r):
    return tr.strings[tr.ranges["name"][r]] if r >= 0 else None


def test_kernel_to_launch_to_innermost_op(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    tr = load_trace(t.write(tmp_path / "a.json"))
    L = link(tr)
    ops = [_name(tr, r) for r in L.gpu_op]
    assert ops == [
        "aten::addmm",
        "aten::bmm",
        "aten::div",
        "aten::masked_fill",
        "aten::_softmax",
        "aten::native_dropout",
        "aten::bmm",
        "aten::addmm",
    ]
    assert (L.gpu_launch >= 0).all()
    assert all(tr.ranges["kind"][r] == LAUNCH for r in L.gpu_launch)
    # nesting: addmm inside linear inside the module
    r = L.gpu_op[0]
    assert [_name(tr, a) for a in L.ancestors(int(r))] == ["aten::linear", "nn.Module: NaiveAttention_0"]


def test_external_id_fallback_when_launch_is_missing(tmp_path):
    t = SynthTrace()
    naive_attention(t)
    t.events = [e for e in t.events if e.get("cat") != "cuda_runtime"]
    tr = load_trace(t.write(tmp_path / "a.json"))
    L = link(tr)
    assert (L.gpu_launch < 0).all()
    assert _name(tr, L.gpu_op[1]) == "aten::bmm"


def _with_backward(t, use_flows=True):
    seqs = naive_attention(t)
    # backward on the autograd thread: one root per forward op with a sequence number
    for tag in ("out", "pv", "softmax", "qk"):
        s = seqs[tag]
        with t.op(f"autograd::engine::evaluate_function: {tag}Backward0", tid=200, seq=s) as root:
            if use_flows:
                t.flow_end(1000 + s, root["ts"], 200)
            with t.op("aten::mm" if tag == "out" else "aten::bmm", tid=200):
                t.kernel(f"bwd_gemm_{tag}", tid=200)
    if use_flows:
        # forward flow starts on the forward op carrying that sequence number
        for e in list(t.events):
            if e.get("cat") == "cpu_op" and e["tid"] == 100 and "Sequence number" in e.get("args", {}):
                t.events.append(
                    {
                        "ph": "s",
                        "id": 1000 + e["args"]["Sequence number"],
                        "pid": t.pid,
                        "tid": 100,
                        "ts": e["ts"],
                        "cat": "fwdbwd",
                        "name": "fwdbwd",
                    }
                )
    return seqs


def test_backward_roots_link_to_forward_ops_by_flow_and_by_sequence(tmp_path):
    for use_flows in (True, False):
        t = SynthTrace()
        _with_backward(t, use_flows)
        tr = load_trace(t.write(tmp_path / f"b{use_flows}.json"))
        L = link(tr)
        roots = np.flatnonzero(L.backward_root == np.arange(tr.n_ranges))
        got = {_name(tr, r).split(": ")[1]: _name(tr, L.forward_of[r]) for r in roots}
        assert got == {
            "outBackward0": "aten::linear",
            "pvBackward0": "aten::bmm",
            "softmaxBackward0": "aten::_softmax",
            "qkBackward0": "aten::bmm",
        }, use_flows


def test_forward_context_maps_backward_kernels_to_the_forward_op(tmp_path):
    t = SynthTrace()
    _with_backward(t)
    tr = load_trace(t.write(tmp_path / "c.json"))
    L = link(tr)
    ctx = L.forward_context(L.gpu_parent)
    names = [_name(tr, r) for r in ctx]
    # forward kernels keep their launching range; each backward gemm lands on the op it differentiates
    assert names[:8] == [_name(tr, r) for r in L.gpu_parent[:8]]
    assert names[8:] == ["aten::linear", "aten::bmm", "aten::_softmax", "aten::bmm"]
    assert L.forward_context(np.array([-1])).tolist() == [-1]


def test_lexorder_is_lexsort_with_the_major_key_first():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 300))
        keys = [
            rng.integers(-5, 5, n),
            rng.integers(0, 2, n).astype(bool),
            rng.integers(-(2**20), 2**20, n),
            rng.integers(0, 3, n).astype(np.int32),
        ][: int(rng.integers(1, 5))]
        assert lexorder(*keys).tolist() == np.lexsort(keys[::-1]).tolist()
    # keys too wide for one int64 together (minutes of nanosecond starts and durations): the keys
    # that do not fit order only the rows that tie on the ones before them
    wide = [np.array([3, 1, 2, 1]) * 2**40, np.array([0, 5, 1, 2]) * 2**40]
    assert lexorder(*wide).tolist() == np.lexsort(wide[::-1]).tolist() == [3, 1, 2, 0]
    for _ in range(500):
        n = int(rng.integers(0, 300))
        pool = [
            rng.integers(0, 3, n).astype(np.int32),  # a thread
            rng.integers(0, 40, n) * 2**33,  # starts far apart, with ties
            -rng.integers(0, 2**30, n),  # durations, negated
            rng.integers(-(2**62), 2**62, n),  # too wide to combine with anything
            rng.integers(0, 2, n).astype(bool),
        ]
        keys = [pool[i] for i in rng.permutation(len(pool))[: int(rng.integers(1, 6))]]
        assert lexorder(*keys).tolist() == np.lexsort(keys[::-1]).tolist()
    floats = [np.array([0.5, 0.25, 0.5]), np.array([2, 1, 0])]
    assert lexorder(*floats).tolist() == [1, 2, 0]


def test_unique_ints_is_np_unique():
    """The mask path (values spanning a small range, its inverse by a cumulative sum where the
    range is dense and a search where it is sparse) and the fallback (wide spans, floats, 2-D)
    give np.unique's arrays, dtypes included."""
    rng = np.random.default_rng(11)
    cases = [np.zeros(0, np.int64), np.array([7]), np.array([3, 3, 3], np.int8)]
    for _ in range(150):
        n = int(rng.integers(1, 400))
        lo, span = int(rng.integers(-50, 50)), int(rng.choice([1, 5, n, 4 * n, 40 * n, 10**5, 10**9]))
        dt = rng.choice([np.int8, np.int16, np.int32, np.int64, np.uint16])
        a = rng.integers(lo, lo + span, n)
        if np.dtype(dt).kind == "u":
            a = np.abs(a)
        cases.append(a.astype(dt))  # int8/int16 wrap: values over the whole type
    cases += [rng.random(50), rng.integers(0, 5, (10, 2))]
    for a in cases:
        for index in (False, True):
            for inverse in (False, True):
                want = np.unique(a, return_index=index, return_inverse=inverse)
                got = unique_ints(a, return_index=index, return_inverse=inverse)
                want, got = (w if isinstance(w, tuple) else (w,) for w in (want, got))
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
