"""Build small, hand-made Kineto traces for unit tests.

    t = SynthTrace()
    with t.module("NaiveAttention_0"):
        with t.op("aten::bmm", dims=[[8, 128, 64], [8, 64, 128]], types=["c10::BFloat16"] * 2):
            t.kernel("gemm_kernel", dur=10)
    path = t.write(tmp_path / "x.json")

Times advance automatically; every op gets an External id, every kernel a launch with a
correlation id, as Kineto writes them.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from typing import Optional

H200 = {
    "id": 0,
    "name": "NVIDIA H200",
    "totalGlobalMem": 150109880320,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}


class SynthTrace:
    def __init__(self, device: Optional[dict] = None, pid: int = 100, tid: int = 100):
        self.events: list[dict] = []
        self.device = H200 if device is None else device
        self.pid, self.tid = pid, tid
        self.now = 1000.0
        self.gpu_now = 1000.0
        self.ext = 1
        self.corr = 1
        self.seq = 1
        self.flow = 1
        self.stack: list[int] = []  # external ids of open ops
        self.meta = {"schemaVersion": 1}

    def _tick(self, d: float = 1.0) -> float:
        self.now += d
        return self.now

    @contextlib.contextmanager
    def _range(self, cat: str, name: str, args: dict, tid: Optional[int] = None):
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": tid or self.tid,
            "ts": self._tick(),
            "dur": 0,
            "args": args,
        }
        self.events.append(ev)
        yield ev
        ev["dur"] = round(self._tick() - ev["ts"], 3)

    def module(self, cls_with_index: str, tid: Optional[int] = None):
        return self._range(
            "python_function",
            f"nn.Module: {cls_with_index}",
            {"Python id": len(self.events), "Python parent id": None},
            tid,
        )

    def function(self, name: str, tid: Optional[int] = None):
        return self._range("python_function", name, {"Python id": len(self.events)}, tid)

    def annotation(self, name: str, tid: Optional[int] = None):
        self.ext += 1
        return self._range("user_annotation", name, {"External id": self.ext}, tid)

    @contextlib.contextmanager
    def op(
        self,
        name: str,
        dims=None,
        types=None,
        concrete=None,
        strides=None,
        seq: Optional[int] = None,
        tid: Optional[int] = None,
        flow_start: Optional[int] = None,
    ):
        self.ext += 1
        args = {"External id": self.ext, "Record function id": 0}
        if seq is not None:
            args["Sequence number"] = seq
            args["Fwd thread id"] = 0
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types or [""] * len(dims)
            args["Input Strides"] = strides or [[] for _ in dims]
            args["Concrete Inputs"] = concrete or [""] * len(dims)
        with self._range("cpu_op", name, args, tid) as ev:
            if flow_start is not None:
                self.events.append(
                    {
                        "ph": "s",
                        "id": flow_start,
                        "pid": self.pid,
                        "tid": tid or self.tid,
                        "ts": ev["ts"],
                        "cat": "fwdbwd",
                        "name": "fwdbwd",
                    }
                )
            self.stack.append(self.ext)
            try:
                yield ev
            finally:
                self.stack.pop()

    def flow_end(self, flow_id: int, ts: float, tid: int):
        self.events.append(
            {
                "ph": "f",
                "id": flow_id,
                "pid": self.pid,
                "tid": tid,
                "ts": ts,
                "cat": "fwdbwd",
                "name": "fwdbwd",
                "bp": "e",
            }
        )

    def kernel(
        self,
        name: str,
        dur: float = 10.0,
        grid=(132, 1, 1),
        block=(128, 1, 1),
        tid: Optional[int] = None,
        stream: int = 7,
        cat: str = "kernel",
        extra: Optional[dict] = None,
    ) -> dict:
        self.corr += 1
        ext = self.stack[-1] if self.stack else 0
        launch_ts = self._tick(0.5)
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": self.pid,
                "tid": tid or self.tid,
                "ts": launch_ts,
                "dur": 0.4,
                "args": {"External id": ext, "correlation": self.corr, "cbid": 211},
            }
        )
        self.gpu_now = max(self.gpu_now, launch_ts + 1) + 0.1
        args = {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": self.corr}
        if cat == "kernel":
            args.update(
                {
                    "registers per thread": 64,
                    "shared memory": 0,
                    "blocks per SM": 1.0,
                    "warps per SM": 4.0,
                    "grid": list(grid),
                    "block": list(block),
                    "est. achieved occupancy %": 50,
                }
            )
        args.update(extra or {})
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 0,
            "tid": stream,
            "ts": round(self.gpu_now, 3),
            "dur": dur,
            "args": args,
        }
        self.gpu_now += dur
        self.events.append(ev)
        return ev

    def memcpy(self, kind: str = "DtoD (Device -> Device)", nbytes: int = 1 << 20, dur: float = 1.0):
        return self.kernel(f"Memcpy {kind}", dur=dur, cat="gpu_memcpy", extra={"bytes": nbytes})

    def memory(
        self, nbytes: int, addr: int, device_type: int = 1, device_id: int = 0, tid: Optional[int] = None
    ) -> dict:
        """A ``[memory]`` instant event (profile_memory=True) at the current time: ``nbytes`` > 0
        allocates at ``addr``, < 0 frees it. Total Allocated is kept per device."""
        if not hasattr(self, "_mem_total"):
            self._mem_total = {}
        key = (device_type, device_id)
        total = self._mem_total.get(key, 0) + nbytes
        self._mem_total[key] = total
        ev = {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": self.pid,
            "tid": tid or self.tid,
            "ts": self._tick(0.1),
            "args": {
                "Total Reserved": max(total, 1 << 21),
                "Total Allocated": total,
                "Bytes": nbytes,
                "Device Id": device_id,
                "Device Type": device_type,
                "Addr": addr,
            },
        }
        self.events.append(ev)
        return ev

    def step(self, n: int):
        return self.annotation(f"ProfilerStep#{n}")

    def counter_range(self, name: str, metrics: dict, ts: Optional[float] = None, dur: float = 100.0) -> dict:
        """A CUPTI range-profiler event (``cuda_profiler_range``) with its counters in ``args``,
        as Kineto writes them: device 0 as pid/tid 0, times spread over the profiling span."""
        if not hasattr(self, "_range_now"):
            self._range_now = 1000.0
        ev = {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": name,
            "pid": 0,
            "tid": 0,
            "ts": self._range_now if ts is None else ts,
            "dur": dur,
            "args": dict(metrics),
        }
        self._range_now = ev["ts"] + dur
        self.events.append(ev)
        return ev

    def doc(self) -> dict:
        d = dict(self.meta)
        if self.device:
            d["deviceProperties"] = [self.device]
        d["traceEvents"] = self.events
        return d

    def write(self, path, gz: Optional[bool] = None) -> str:
        path = str(path)
        data = json.dumps(self.doc(), indent=1).encode()
        if gz if gz is not None else path.endswith(".gz"):
            with gzip.open(path, "wb") as f:
                f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(data)
        return path


BF16 = "c10::BFloat16"
F32 = "float"


def naive_attention(
    t: SynthTrace,
    b=2,
    h=4,
    s=128,
    d=64,
    dtype=BF16,
    module=True,
    causal_mask=True,
    dropout=True,
    seqs: Optional[dict] = None,
):
    """Emit one eager attention call: qkv linear, QK^T bmm, div, masked_fill, softmax, dropout,
    PV bmm, out linear. ``seqs`` (if given) collects sequence numbers per phase for backward tests."""
    e = h * d
    seqs = seqs if seqs is not None else {}

    def seq(tag):
        t.seq += 1
        seqs[tag] = t.seq
        return t.seq

    ctx = t.module("NaiveAttention_0") if module else contextlib.nullcontext()
    with ctx:
        with t.op("aten::linear", dims=[[b, s, e], [3 * e, e], [3 * e]], types=[dtype] * 3, seq=seq("qkv")):
            with t.op("aten::addmm", dims=[[3 * e], [b * s, e], [e, 3 * e]], types=[dtype] * 3):
                t.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dur=20)
        with t.op("aten::matmul", dims=[[b, h, s, d], [b, h, d, s]], types=[dtype] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, d], [b * h, d, s]], types=[dtype] * 2, seq=seq("qk")):
                t.kernel("nvjet_sm90_tst_128x128_64x4_h_bz_TNN", dur=8)
        with t.op("aten::div", dims=[[b, h, s, s], []], types=[dtype, "double"], seq=seq("scale")):
            t.kernel(
                "void at::native::vectorized_elementwise_kernel<8, at::native::BUnaryFunctor<"
                "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::DivFunctor<float> > >",
                dur=5,
            )
        if causal_mask:
            with t.op(
                "aten::masked_fill",
                dims=[[b, h, s, s], [s, s], []],
                types=[dtype, "bool", "Scalar"],
                concrete=["", "", "-inf"],
                seq=seq("mask"),
            ):
                t.kernel("void at::native::elementwise_kernel<128, 4, masked_fill_kernel>", dur=6)
        with t.op("aten::softmax", dims=[[b, h, s, s], [], []], types=[dtype, "Scalar", ""], concrete=["", "-1", ""]):
            with t.op(
                "aten::_softmax",
                dims=[[b, h, s, s], [], []],
                types=[dtype, "Scalar", "Scalar"],
                concrete=["", "-1", "False"],
                seq=seq("softmax"),
            ):
                t.kernel(
                    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 7, "
                    "false, false>",
                    dur=7,
                )
        if dropout:
            with t.op(
                "aten::dropout",
                dims=[[b, h, s, s], [], []],
                types=[dtype, "Scalar", "Scalar"],
                concrete=["", "0.1", "True"],
            ):
                with t.op(
                    "aten::native_dropout",
                    dims=[[b, h, s, s], [], []],
                    types=[dtype, "Scalar", "Scalar"],
                    concrete=["", "0.1", "True"],
                    seq=seq("dropout"),
                ):
                    t.kernel(
                        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
                        "unsigned int, 1, 8, bool>",
                        dur=6,
                    )
        with t.op("aten::matmul", dims=[[b, h, s, s], [b, h, s, d]], types=[dtype] * 2):
            with t.op("aten::bmm", dims=[[b * h, s, s], [b * h, s, d]], types=[dtype] * 2, seq=seq("pv")):
                t.kernel("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNN", dur=8)
        with t.op("aten::linear", dims=[[b, s, e], [e, e], [e]], types=[dtype] * 3, seq=seq("out")):
            with t.op("aten::addmm", dims=[[e], [b * s, e], [e, e]], types=[dtype] * 3):
                t.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dur=9)
    return seqs


def mlp_and_loss(t: SynthTrace, b=2, s=128, e=256, vocab=1000, dtype=BF16):
    """Non-attention work: an MLP and a cross-entropy loss (log_softmax)."""
    with t.module("MLP_0"):
        with t.op("aten::linear", dims=[[b, s, e], [4 * e, e], [4 * e]], types=[dtype] * 3):
            with t.op("aten::addmm", dims=[[4 * e], [b * s, e], [e, 4 * e]], types=[dtype] * 3):
                t.kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", dur=30)
        with t.op("aten::gelu", dims=[[b, s, 4 * e], []], types=[dtype, ""]):
            t.kernel("void at::native::vectorized_elementwise_kernel<8, GeluCUDAKernelImpl>", dur=4)
    with t.op("aten::cross_entropy_loss", dims=[[b * s, vocab], [b * s]], types=[F32, "long int"]):
        with t.op(
            "aten::_log_softmax",
            dims=[[b * s, vocab], [], []],
            types=[F32, "Scalar", "Scalar"],
            concrete=["", "1", "False"],
        ):
            t.kernel(
                "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                "LogSoftMaxForwardEpilogue>",
                dur=5,
            )
