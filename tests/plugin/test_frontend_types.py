"""The dashboard's TypeScript types (frontend/src/types.ts) against the JSON the routes send.

types.ts is written by hand after docs/report-schema.md and docs/plugin.md; this test keeps it
honest. The routes are called on sample traces (one with Nsight Compute counters beside it) and
every object is checked against the interface that describes it, nested ones included:

* a field the interface declares (not optional) must be sent, with a value of the declared kind
  (number, string or one of the literal strings, boolean, null, array, object);
* a field the server sends must be declared, or listed in ``NOT_IN_TYPES`` below (sent, not
  used by the dashboard).

So a renamed, removed or retyped field, or a new one nobody looked at, fails here instead of
leaving a blank cell in the dashboard.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import pytest
from replay_helpers import fake_replay

from conftest import Served, put

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The files whose exported interfaces describe route JSON (the memory view keeps its own).
TYPE_FILES = [os.path.join(ROOT, "frontend", "src", *p) for p in (("types.ts",), ("views", "memory.ts"))]
MEASURED = os.path.join(ROOT, "tests", "data", "measured")

# Sent by the server, not declared in types.ts because the dashboard does not read them (the
# state as of issue #14; declaring one in types.ts means removing it here). Keyed by interface,
# or by interface.field for an inline object type.
NOT_IN_TYPES: dict[str, set[str]] = {
    "Summary": {"memory"},  # shown from /memory
    "Summary.thresholds": {"low_occupancy_pct", "short_kernel_us", "tiny_grid_sm_fraction"},
    "Phase": {"upper_bound", "upper_bound_flops_per_s", "upper_bound_bytes_per_s"},
    "Device": {"l2_bytes"},
    "Kernel": {"dram_bytes", "cost_role"},
    "KernelsResponse": {"selection", "state"},
    "KernelGroupsResponse": {"selection", "state"},
    "RooflineResponse": {"selection", "state"},
    "TimelineResponse": {"selection", "state"},
    "RooflineResponse.thresholds": {"low_occupancy_pct", "short_kernel_us", "tiny_grid_sm_fraction"},
    "CompareResponse.backends": {"base_main", "new_main"},
    "Measurements": {"candidates", "group"},
    "Measurements.window": {"first_kernel_id", "first_ts", "kernels", "last_kernel_id", "last_ts", "offset"},
    "CompareResponse": {"kind", "schema", "state"},
    "CompareRow": {"delta_pct"},
    "CompareSide": {"bound_time_us", "intensity"},
    "Layer": {"k_bytes", "logsumexp_bytes", "out_bytes", "q_bytes", "score_shape", "source", "v_bytes"},
    "MemoryResponse": {"selection", "state", "step", "steps"},
    "MemoryBlock.data_movement": {"syncs"},
    "MemoryBlock.attention_spans": {"source"},
    "MemoryBlock.data_movement.totals": {"copy_cpu_time_us", "host_device_time_us"},
    "Copy": {"noncontiguous_input", "score_sized"},
    "Transfer": {"counted_with_copy", "instances"},
    "Flag": {
        "bytes",
        "calls",
        "device",
        "direction",
        "instances",
        "op",
        "phase",
        "shape",
        "shapes",
        "time_us",
        "within",
    },
    "MemDevice": {"device_id", "device_type_code", "end_allocated_bytes", "peak_in_attention", "start_allocated_bytes"},
    "MemDevice.attention": {"empty_allocs"},
    "MemDevice.score_matrices": {"examples"},
    "MemPeak": {"instance"},
    "MemCall": {"alloc_bytes", "core_peak_vs_fused", "excess_over_fused_bytes", "score_alloc_bytes"},
}

# Interfaces no answer on these sample traces reaches (empty lists, states that pass): a new
# interface must be reached by the answers below or listed here.
NOT_EXERCISED = {
    "LoadProgress",  # only while a file is being analysed
    "Notice",  # the sample traces raise no notice
    "GraphsBlock",  # no CUDA-graph replay in them
    "AdviceEvidence",
    "AdvicePhase",
    "AdviceKernel",  # views cast Advice.evidence (a Record) to them
}

# ------------------------------------------------------------------ a small TypeScript reader


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "{[(<":
            depth += 1
        elif ch in "}])>":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def _wrapped(t: str) -> bool:
    """``(...)`` with the first parenthesis closed by the last character."""
    if not (t.startswith("(") and t.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(t):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i == len(t) - 1
    return False


def _fields(body: str) -> dict[str, tuple[str, bool]]:
    """``{ a: T; b?: U }`` body -> {name: (type, optional)}."""
    out = {}
    for part in _split_top(body.replace("\n", " "), ";") if ";" in body else _split_top(body, ","):
        m = re.match(r"(\w+)(\??):\s*(.+)$", part.strip(), re.S)
        assert m, f"cannot read the field {part!r} in types.ts"
        out[m.group(1)] = (m.group(3).strip(), m.group(2) == "?")
    return out


def read_types(paths: list[str] = TYPE_FILES) -> tuple[dict[str, dict[str, tuple[str, bool]]], dict[str, str]]:
    """(interfaces: name -> fields, type aliases: name -> type text)."""
    text = "\n".join(_strip_comments(open(p, encoding="utf-8").read()) for p in paths)
    interfaces, aliases = {}, {}
    for m in re.finditer(r"export\s+interface\s+(\w+)\s*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        interfaces[m.group(1)] = _fields(text[m.end() : i - 1])
    for m in re.finditer(r"export\s+type\s+(\w+)\s*=\s*([^;]+);", text):
        aliases[m.group(1)] = m.group(2).strip()
    return interfaces, aliases


# ------------------------------------------------------------------ checking a value


class Checker:
    def __init__(self) -> None:
        self.interfaces, self.aliases = read_types()
        self.errors: dict[str, str] = {}  # problem -> where it was first seen
        self.seen: set[str] = set()
        self.unused_sent: dict[str, set[str]] = {}  # NOT_IN_TYPES entries the server did send

    def check(self, value: Any, ts_type: str, where: str, key: str) -> None:
        """``value`` (found at ``where``) against the TypeScript type ``ts_type``; ``key`` names
        the declaration (``Interface.field`` for inline object types)."""
        alts = _split_top(ts_type, "|")
        for a in alts:  # recurse into the first alternative that fits
            if self._fits(value, a, where, key, dry=True):
                self._fits(value, a, where, key, dry=False)
                return
        self.error(key, f"{_show(value)} is not {ts_type}", where)

    def error(self, key: str, what: str, where: str) -> None:
        self.errors.setdefault(f"{key}: {what}", where)

    def _union(self, value: Any, t: str, where: str, key: str, dry: bool) -> bool:
        if dry:
            return any(self._fits(value, a, where, key, True) for a in _split_top(t, "|"))
        self.check(value, t, where, key)
        return True

    def _fits(self, value: Any, t: str, where: str, key: str, dry: bool) -> bool:
        t = t.strip()
        if _wrapped(t):
            return self._union(value, t[1:-1], where, key, dry)
        if len(_split_top(t, "&")) > 1:  # an intersection: the fields of every part
            if not isinstance(value, dict):
                return False
            if not dry:
                merged: dict[str, tuple[str, bool]] = {}
                for part in _split_top(t, "&"):
                    merged.update(self._part_fields(part))
                self.object(value, merged, where, key)
            return True
        if t in ("unknown", "any"):
            return True
        if t == "null":
            return value is None
        if t == "number":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if t == "string":
            return isinstance(value, str)
        if t == "boolean":
            return isinstance(value, bool)
        if t[:1] in "\"'":
            return value == t[1:-1]
        if t.startswith("[") and t.endswith("]"):  # a tuple: [number, number]
            parts = _split_top(t[1:-1], ",")
            if not isinstance(value, list) or len(value) != len(parts):
                return False
            if dry:
                return all(self._union(v, p, where, key, True) for v, p in zip(value, parts))
            for i, (v, p) in enumerate(zip(value, parts)):
                self.check(v, p, f"{where}[{i}]", key)
            return True
        if t.endswith("[]"):
            if not isinstance(value, list):
                return False
            if dry:  # which alternative: the one whose elements fit (number[] vs number[][])
                return all(self._union(v, t[:-2], where, key, True) for v in value[:20])
            else:
                for i, v in enumerate(value[:200]):
                    self.check(v, t[:-2], f"{where}[{i}]", key)
            return True
        if t.startswith(("Record<", "Partial<Record<")):
            if not isinstance(value, dict):
                return False
            if not dry:
                inner = t[t.index("Record<") + 7 : t.rindex(">")].rstrip(">")
                key_t, val_t = _split_top(inner, ",")
                for k, v in value.items():
                    self.check(k, key_t, f"{where} key", key)
                    self.check(v, val_t, f"{where}.{k}", key)
            return True
        if t.startswith("{"):
            if not isinstance(value, dict):
                return False
            if not dry:
                self.object(value, _fields(t[1:-1]), where, key)
            return True
        if t in self.aliases:
            return self._union(value, self.aliases[t], where, t, dry)
        if t in self.interfaces:
            if not isinstance(value, dict):
                return False
            if not dry:
                self.interface(value, t, where)
            return True
        raise AssertionError(f"{where}: the test does not know the TypeScript type {t!r}")

    def _part_fields(self, part: str) -> dict[str, tuple[str, bool]]:
        """The fields of one part of an intersection: an interface, ``Pick<I, "a" | "b">`` or ``{...}``."""
        m = re.fullmatch(r"Pick<\s*(\w+)\s*,(.+)>", part, re.S)
        if m:
            keys = {k.strip().strip("\"'") for k in _split_top(m.group(2), "|")}
            return {k: v for k, v in self.interfaces[m.group(1)].items() if k in keys}
        if part in self.interfaces:
            self.seen.add(part)  # reached as a part of an intersection
            return self.interfaces[part]
        return _fields(part[1:-1])

    def interface(self, value: dict, name: str, where: str = "") -> None:
        self.seen.add(name)
        self.object(value, self.interfaces[name], where or name, name)

    def object(self, value: dict, fields: dict[str, tuple[str, bool]], where: str, key: str) -> None:
        for name, (t, optional) in fields.items():
            if name not in value:
                if not optional:
                    self.error(key, f"types.ts declares '{name}', the server does not send it", where)
                continue
            self.check(value[name], t, f"{where}.{name}", f"{key}.{name}")
        allowed = NOT_IN_TYPES.get(key, set())
        for name in sorted(allowed & set(fields)):
            self.error(key, f"'{name}' is declared in types.ts now: remove it from NOT_IN_TYPES['{key}']", where)
        self.unused_sent.setdefault(key, set()).update(set(value) & allowed)
        for name in sorted(set(value) - set(fields) - allowed):
            self.error(
                key,
                f"the server sends '{name}', which types.ts does not declare (declare it, or "
                f"list it in NOT_IN_TYPES['{key}'] of this test)",
                where,
            )


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


# ------------------------------------------------------------------ the routes on sample traces


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("types")
    put(logdir, "flash", "sdpa_flash_s2048_fwd")
    put(logdir, "gpt", "gpt4l_sdpa_train")
    put(logdir, "naive", "gpt4l_naive_train")  # eager attention: advice with its evidence
    run = logdir / "decode"
    run.mkdir()
    trace = "decode_gqa_flash.pt.trace.json.gz"
    shutil.copyfile(os.path.join(MEASURED, trace), run / trace)
    shutil.copyfile(os.path.join(MEASURED, "decode_gqa_flash.ncu.csv"), run / (trace + ".ncu.csv"))
    # a replay beside it (replay/results.py): the measured backends per call in the summary
    fake_replay(run / trace, {"flash": (70.0, None), "cudnn": (60.0, None), "math": (3000.0, None)})
    mem = logdir / "mem"  # profile_memory=True: the allocation part of /memory
    mem.mkdir()
    shutil.copyfile(
        os.path.join(ROOT, "tests", "data", "memory", "h200", "gpt4l_naive_train_mem.pt.trace.json.gz"),
        mem / "gpt4l_naive_train_mem.pt.trace.json.gz",
    )
    ddp = logdir / "ddp2"  # a job of two ranks: /runs' job, the overview's job row
    ddp.mkdir()
    src = os.path.join(ROOT, "tests", "data", "ddp2", "ddp2_gpt_sdpa")
    for f in sorted(os.listdir(src)):
        shutil.copyfile(os.path.join(src, f), ddp / f)
    s = Served(logdir)
    try:
        s.settled(7)
        out: dict[str, list[Any]] = {
            "RunsResponse": [s.runs()],
            "SummaryResponse": [],
            "KernelsResponse": [],
            "KernelGroupsResponse": [],
            "RooflineResponse": [],
            "CompareResponse": [],
            "Selection": [],
        }
        for r in ("flash", "gpt", "naive", "decode", "mem"):
            out["SummaryResponse"].append(s.get("/summary", run=r).json)
            out["KernelsResponse"].append(s.get("/kernels", run=r, scope="all", limit=200).json)
            out["KernelGroupsResponse"].append(s.get("/kernels", run=r, scope="all", group=1, limit=200).json)
            for group in ("1", "0"):
                out["RooflineResponse"].append(s.get("/roofline", run=r, scope="all", group=group).json)
            out.setdefault("MemoryResponse", []).append(s.get("/memory", run=r).json)
            out.setdefault("TimelineResponse", []).append(s.get("/timeline", run=r).json)
        out["OverviewRow"] = s.get("/overview").json["runs"]
        out["Selection"].append(s.get("/summary", run="flash", partial="1").json["selection"])
        out["CompareResponse"].append(s.get("/compare", base="flash", new="gpt").json)
        out["CompareResponse"].append(s.get("/compare", base="naive", new="gpt").json)
        return out
    finally:
        s.close()


def test_types_ts_is_readable():
    interfaces, aliases = read_types()
    assert {"Summary", "Kernel", "Phase", "RooflinePoint", "CompareResponse"} <= set(interfaces)
    assert interfaces["Kernel"]["bound"] == ("Bound", False) and "memory" in aliases["Bound"]
    assert interfaces["FileEntry"]["progress"] == ("LoadProgress", True)


def test_the_checker_catches_drift():
    c = Checker()
    c.check({"code": "x", "message": "m"}, "Notice", "n", "Notice")  # 'fix' missing
    c.check({"code": "x", "message": "m", "fix": "f", "new": 1}, "Notice", "n", "Notice")  # undeclared
    c.check({"code": 1, "message": "m", "fix": "f"}, "Notice", "n", "Notice")  # wrong kind
    c.check("sideways", "Bound", "b", "Kernel.bound")  # not in the union
    peaks = "{ flops: Record<string, number | null>; memory_bandwidth: number | null }"
    c.check({"flops": {"bf16": "fast"}, "memory_bandwidth": None}, peaks, "d", "Device.peaks")  # in a Record
    assert len(c.errors) == 5, c.errors
    c = Checker()
    c.check({"code": "x", "message": "m", "fix": "f"}, "Notice", "n", "Notice")
    c.check([1, None, 2.5], "(number | null)[]", "l", "X")
    assert not c.errors, c.errors


def test_every_route_answer_matches_types_ts(answers):
    c = Checker()
    for name, values in answers.items():
        for i, v in enumerate(values):
            c.interface(v, name, f"{name}#{i}")
    assert not c.errors, "\n".join(f"{k} (at {w})" for k, w in c.errors.items())
    stale = {k: sorted(v - c.unused_sent.get(k, set())) for k, v in NOT_IN_TYPES.items()}
    assert not any(stale.values()), f"NOT_IN_TYPES lists fields the server no longer sends: {stale}"
    # the nested interfaces were reached, so they were checked too
    assert set(c.interfaces) - c.seen == NOT_EXERCISED, sorted(set(c.interfaces) - c.seen)
