"""The run in the form the rules read: attention kernel rows, device peaks, the SDPA calls with their
recorded inputs and backend, the ops around kernels, and the replay model of the step (replay.py)."""

from __future__ import annotations

from typing import Any, Optional

import msgspec
import numpy as np

from ..attention import patterns as P
from ..roofline.cost import SDPA_SCHEMAS, sdpa_shapes
from ..trace.records import OP
from ..trace.shapes import SignatureArgs, parse_args

FUSED_PEAK_FRACTION = 0.35  # a fused attention kernel's FLOP rate, as a fraction of the bf16/fp16 peak
FUSED_PEAK_FRACTION_FP32 = 0.6  # ... and of the fp32 peak for fp32 inputs (mem-efficient kernel on CUDA cores)
FUSED_BANDWIDTH_FRACTION = 0.8  # ... and its memory rate when it is bandwidth-limited (decode)

# the kernel fields the rules read (building only these is several times cheaper)
ROW_FIELDS = (
    "id",
    "name",
    "ts",
    "dur_us",
    "device",
    "stream",
    "phase",
    "direction",
    "bound",
    "flops",
    "bytes",
    "memory_util",
    "compute_util",
    "instance",
    "dtype",
    "peak",
    "kind",
    "op",
    "cost_op",
    "module",
    "scope",
    "attention",
    "core",
    "estimated",
    "intensity",
    "shapes",
    "cost_detail",
    "module_path",
    "source",
    "graph",
)


class _RowMethods:
    """What the rules ask of a kernel row, on a struct: ``k["phase"]``, ``k.get("shapes")``, ``"x" in k``,
    with a dict's answers (a field without a value is a missing key)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        v = getattr(self, key, msgspec.UNSET)
        if v is msgspec.UNSET:
            raise KeyError(key)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = getattr(self, key, msgspec.UNSET)
        return default if v is msgspec.UNSET else v

    def __contains__(self, key: str) -> bool:
        return getattr(self, key, msgspec.UNSET) is not msgspec.UNSET


# An attention kernel row as the rules read it: a struct of ROW_FIELDS (~300 bytes) instead of a dict
# (~800): 21k attention kernels on a 250 MB Llama trace are ~17 MB of dicts.
AttentionRow = msgspec.defstruct(
    "AttentionRow", [(f, Any, msgspec.UNSET) for f in ROW_FIELDS], bases=(_RowMethods, msgspec.Struct), gc=False
)

ROWS_AT_ONCE = 4096  # attention rows built per row_structs call (the columns' lists are temporaries)

_BACKEND_OF = (
    ("_scaled_dot_product_attention_math", "math"),
    ("flash", "flash"),
    ("efficient", "efficient"),
    ("cudnn", "cudnn"),
    ("fused_attention_overrideable", "overrideable"),
)


class Run:
    """One report (and, when given, its trace and links) as the rules read it."""

    def __init__(self, report: dict, trace: Any = None, links: Any = None):
        self.rep = report
        self.trace, self.links = trace, links
        self.att_time = float(report.get("attention_time_us") or 0.0)
        dev = report.get("device") or {}
        peaks = dev.get("peaks") or {}
        self.flops_peak = peaks.get("flops") or {}
        self.bw = peaks.get("memory_bandwidth")
        self.device = dev.get("name")
        self.device_key = dev.get("key")
        self.k = attention_rows(report.get("kernels"))
        self.by_id = {k.id: k for k in self.k}
        self.steps = 1 if report.get("step") is not None else max(1, len(report.get("steps") or []))
        self._sdpa: Optional[list[dict]] = None
        self._replay: Any = None
        self._replay_done = False
        self._mask_builders: Any = None  # equivalence._Builders, read once
        self._replay_low: Any = None
        self.predictions: dict[tuple[Any, ...], Any] = {}  # sdpa_choice.predict_once's memo
        self._args = SignatureArgs(trace.signatures) if trace is not None else None
        self.has_backward = any(k.direction == "backward" for k in self.k) or self._trace_has_backward()

    def _trace_has_backward(self) -> bool:
        if self.links is None:
            return False
        return bool((self.links.backward_root >= 0).any())

    @property
    def peak_bf16(self) -> Optional[float]:
        return self.flops_peak.get("bf16") or self.flops_peak.get("fp16")

    @property
    def span(self) -> float:
        return float(self.rep.get("span_us") or 0.0)

    # the replay model of the step (None without the trace, or when it cannot be built)
    @property
    def replay(self) -> Any:
        if not self._replay_done:
            self._replay_done = True
            if self.trace is not None and self.links is not None:
                from .replay import StepModel

                self._replay = StepModel.build(self.trace, self.links, self.rep)
        return self._replay

    # the same replay at the low end of the profiler's cost per op (the slowest CPU it allows)
    @property
    def replay_low(self) -> Any:
        if self._replay_low is None and self.replay is not None:
            from .replay import PROFILER_OP_US_LOW

            self._replay_low = self.replay.variant(PROFILER_OP_US_LOW)
        return self._replay_low

    # SDPA calls: outermost SDPA-family forward op, its recorded inputs, backend and kernels
    def sdpa_calls(self) -> list[dict]:
        if self._sdpa is None:
            self._sdpa = (
                _sdpa_calls(self.trace, self.links, {k.id for k in self.k})
                if self.trace is not None and self.links is not None
                else []
            )
        return self._sdpa

    def math_kernel_ids(self) -> set:
        return {i for c in self.sdpa_calls() if c["backend"] == "math" for i in c["kernel_ids"]}

    def call_rows(self, c: dict) -> list[dict]:
        """The attention kernel rows of one SDPA call (a dict lookup per kernel)."""
        get = self.by_id.get
        return [r for r in (get(i) for i in c["kernel_ids"]) if r is not None]

    def fused_peak(self, dtype: Optional[str]) -> tuple[Optional[str], Optional[float], float]:
        """The FLOP peak a fused kernel on inputs of ``dtype`` runs against, its name and the
        fraction of it assumed (the fallback when the backend table has no row for this GPU)."""
        if dtype == "fp32":
            return (
                ("fp32", self.flops_peak["fp32"], FUSED_PEAK_FRACTION_FP32)
                if self.flops_peak.get("fp32")
                else (None, None, FUSED_PEAK_FRACTION_FP32)
            )
        for name in (dtype, "fp16" if dtype == "bf16" else "bf16") if dtype in ("bf16", "fp16") else ("bf16",):
            if self.flops_peak.get(name):
                return name, self.flops_peak[name], FUSED_PEAK_FRACTION
        return None, None, FUSED_PEAK_FRACTION

    def op_names_under(self, kernel_id: int, stop: int = 8) -> list[str]:
        """The ops enclosing one kernel's launch, innermost first (at most ``stop``)."""
        if self.trace is None or self.links is None or kernel_id >= len(self.links.gpu_op):
            return []
        R, names, parent = self.trace.ranges, self.trace.strings, self.links.parent
        out: list[str] = []
        r = int(self.links.gpu_op[kernel_id])
        while r >= 0 and len(out) < stop:
            if R["kind"][r] == OP:
                out.append(names[R["name"][r]])
            r = int(parent[r])
        return out

    def op_of(self, kernel_id: int) -> int:
        """The innermost op that launched a kernel (a range index), or -1."""
        if self.links is None or kernel_id >= len(self.links.gpu_op):
            return -1
        return int(self.links.gpu_op[kernel_id])

    def op_args(self, r: int) -> list:
        """The parsed inputs of op ``r`` (a list the caller must not change: it is shared by every
        op with the same signature, parsed once: a mask's ops repeat in every layer and step)."""
        if self._args is None or r < 0:
            return []
        return self._args(int(self.trace.ranges["sig"][r])) or []

    def op_name(self, r: int) -> str:
        return self.trace.strings[self.trace.ranges["name"][r]] if self.trace is not None and r >= 0 else ""


def attention_rows(kernels: Any) -> list[Any]:
    """The attention kernel rows as :data:`AttentionRow` structs, from a kernel table or a list of
    row dicts: the rules read fields as attributes in their hot loops."""
    if kernels is None:
        return []
    cols = getattr(kernels, "columns", None)
    if isinstance(cols, dict) and "attention" in cols and hasattr(kernels, "row_structs"):
        idx = np.flatnonzero(np.asarray(cols["attention"], dtype=bool))
        rows: list[Any] = []
        for s in range(0, len(idx), ROWS_AT_ONCE):  # a chunk's columns at a time, not all 30 at once
            rows += kernels.row_structs(idx[s : s + ROWS_AT_ONCE], AttentionRow, ROW_FIELDS)
        return rows
    # a list of row dicts (a report built by hand): the same structs, a missing key left unset
    return [AttentionRow(**{f: k[f] for f in ROW_FIELDS if f in k}) for k in kernels if k.get("attention")]


def _sdpa_calls(trace: Any, links: Any, attention_ids: set) -> list[dict]:
    R = trace.ranges
    names = trace.strings
    n = len(R["kind"])
    if not n:
        return []
    sdpa_name = np.zeros(len(names), dtype=bool)
    for i, s in enumerate(names):
        sch = SDPA_SCHEMAS.get(s)
        if sch is not None and not sch.backward:
            sdpa_name[i] = True
    is_sdpa = sdpa_name[R["name"]] & (R["kind"] == OP)
    if not is_sdpa.any():
        return []
    top = links.outermost_marked(is_sdpa)
    sdpa_rows = np.flatnonzero(is_sdpa)
    calls: dict[int, dict] = {}
    for r in sdpa_rows[top[sdpa_rows] == sdpa_rows].tolist():
        calls[r] = {"range": r, "op": names[R["name"][r]], "kernel_ids": [], "inner": set()}
    inner = sdpa_rows[top[sdpa_rows] != sdpa_rows]
    for r, t in zip(inner.tolist(), top[inner].tolist()):
        if t in calls:
            calls[t]["inner"].add(names[R["name"][r]])
    gp = links.gpu_parent
    ids = np.asarray(sorted(attention_ids), dtype=np.int64)
    ids = ids[ids < len(gp)]
    ctx = links.forward_context(gp[ids])
    tops = np.where(ctx >= 0, top[np.maximum(ctx, 0)], -1)
    for k, t in zip(ids.tolist(), tops.tolist()):
        if t in calls:
            calls[t]["kernel_ids"].append(k)
    out = []
    # every step repeats its calls: the backend per set of inner ops and the inputs per recorded
    # signature are read once
    backend_of: dict[str, Optional[str]] = {}
    inputs_of: dict[tuple[str, int], dict] = {}
    for r, c in calls.items():
        inner = " ".join(sorted(c["inner"])) + " " + c["op"]
        if inner not in backend_of:
            backend_of[inner] = next((be for key, be in _BACKEND_OF if key in inner), None)
        sig = int(R["sig"][r])
        got = inputs_of.get((c["op"], sig))
        if got is None:
            got = inputs_of[(c["op"], sig)] = _call_inputs(
                c["op"], parse_args(trace.signatures[sig]) if sig >= 0 else []
            )
        out.append({"range": r, "op": c["op"], "backend": backend_of[inner], "kernel_ids": c["kernel_ids"], **got})
    return out


def _call_inputs(op: str, args: list) -> dict:
    """An SDPA-family call's recorded inputs: shapes, the enable_gqa flag, q/k/v and the mask's dtype
    and shape."""
    sch = SDPA_SCHEMAS[op]
    gqa_flag = None
    if op == "aten::scaled_dot_product_attention" and len(args) > 7:
        v = args[7].value.strip().lower()
        gqa_flag = True if v in ("true", "1") else False if v in ("false", "0") else None
    mask = args[sch.mask] if args and sch.mask is not None and sch.mask < len(args) else None
    return {
        "shapes": sdpa_shapes(op, args) if args else None,
        "enable_gqa": gqa_flag,
        "qkv": args[sch.q : sch.q + 3] if args else [],
        "mask_dtype": mask.dtype if mask is not None and mask.is_tensor else None,
        "mask_shape": tuple(mask.dims) if mask is not None and mask.is_tensor else None,
    }


def is_flex(rows: list[dict]) -> bool:
    """FlexAttention kernels (their op or name says flex_attention): not SDPA's backends."""
    return any("flex_attention" in ((k.get("op") or "") + " " + (k.get("name") or "")).lower() for k in rows)


def core_rows(run: Run) -> list[dict]:
    return [k for k in run.k if k["phase"] in P.CORE_PHASES]
