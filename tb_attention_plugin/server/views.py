"""The answers of the data routes, as pure functions of an analysed trace (a loader
:class:`~.loader.Snapshot`) and the already-validated parameters. plugin.py parses a request,
finds the trace (:mod:`.selection`) and returns what these build."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Optional

from ..attention import vocabulary as V
from .discovery import FileInfo, still_inside
from .groups import GROUP_DESCENDING, GROUP_SORT_KEYS, query_groups
from .index import BOUNDS, SORT_KEYS, KernelQuery, facets, find_kernel, query_kernels, roofline
from .loader import Snapshot
from .names import add_short, summary_short_names
from .params import HttpError, bool_param, choice_param, int_param, list_param, not_found, text_param
from .selection import Pending, Selection

PHASES = V.PHASES + (V.NOT_ATTENTION,)  # the kernel-table filter's values
_DESCENDING = (
    "dur_us",
    "flops",
    "bytes",
    "intensity",
    "achieved_flops_per_s",
    "achieved_bytes_per_s",
    "compute_util",
    "memory_util",
    "occupancy_pct",
)
SCOPES = ("attention", "all", "other")


def _summary(snap: Snapshot) -> dict[str, Any]:
    return snap.summary or {}


def summary(snap: Snapshot, sel: Selection) -> dict[str, Any]:
    return {
        "state": "ready",
        "selection": sel.echo,
        "seconds": snap.seconds,
        "summary": snap.summary,
        "short_names": summary_short_names(snap.summary),  # the page's kernel names (server/names.py)
    }


def phases(snap: Snapshot, sel: Selection) -> dict[str, Any]:
    """Phase rows, and per direction their total and stacked parts."""
    s = _summary(snap)
    by_dir: dict[str, dict[str, Any]] = {}
    for p in s.get("phases") or []:
        d = by_dir.setdefault(p["direction"], {"direction": p["direction"], "time_us": 0.0, "phases": []})
        d["time_us"] = round(d["time_us"] + (p.get("time_us") or 0.0), 3)
        d["phases"].append({"phase": p["phase"], "label": p["label"], "time_us": p.get("time_us")})
    return {
        "state": "ready",
        "selection": sel.echo,
        "phases": s.get("phases") or [],
        "directions": [by_dir[k] for k in ("forward", "backward") if k in by_dir],
        "attention_time_us": s.get("attention_time_us"),
        "thresholds": s.get("thresholds"),
    }


def kernel_query(args: Any) -> KernelQuery:
    """The ``/kernels`` parameters (400 on a bad one), validated before any waiting. ``group=1``:
    one row per kernel (name, phase, direction), sorted by a GROUP_SORT_KEYS key."""
    group = bool_param(args, "group", False)
    if group:
        sort = choice_param(args, "sort", GROUP_SORT_KEYS, "total_us") or "total_us"
        descending_keys: tuple[str, ...] = GROUP_DESCENDING
    else:
        sort = choice_param(args, "sort", SORT_KEYS, "dur_us") or "dur_us"
        descending_keys = _DESCENDING
    order = choice_param(args, "order", ("asc", "desc"), None)
    return KernelQuery(
        offset=int_param(args, "offset", 0, 0, 1 << 40),
        limit=int_param(args, "limit", 50, 1, 1000),
        sort=sort,
        descending=(order == "desc") if order else sort in descending_keys,
        group=group,
        phase=list_param(args, "phase", PHASES),
        direction=choice_param(args, "direction", V.DIRECTIONS),
        bound=list_param(args, "bound", BOUNDS),
        kind=choice_param(args, "kind", ("kernel", "memcpy", "memset")),
        scope=choice_param(args, "scope", SCOPES, "attention") or "attention",
        q=text_param(args, "q", max_len=4096),  # a substring of a kernel, op or module name
        name=text_param(args, "name", max_len=4096),  # a whole C++ kernel name (a click on a point or finding)
        site=text_param(args, "site", max_len=4096),  # a site's name, as the Sites table shows it
        name_of=int_param(args, "name_of", -1, 0, 1 << 40),  # a kernel id: exactly that kernel's name
    )


def _loaded(snap: Snapshot) -> Any:
    assert snap.loaded is not None, "fetched with need_index=True"
    return snap.loaded


def kernels(snap: Snapshot, sel: Selection, q: KernelQuery) -> dict[str, Any]:
    t = _loaded(snap).kernels
    named = None
    if q.name_of >= 0:  # the page's URL carries the kernel's id, not its (long) C++ name
        row = find_kernel(t, q.name_of)
        if row is None:
            raise not_found(f"no kernel with id {q.name_of}", param="name_of")
        named = str(row.get("name") or "")
        q = replace(q, name=named)
    out = query_groups(t, q) if q.group else query_kernels(t, q)
    for r in out.get("rows") or []:
        add_short(r)
        add_short(r.get("longest"))
    out.update({"state": "ready", "selection": sel.echo, "facets": facets(t)})
    if named is not None:
        out["named"] = named
    return out


def kernel(snap: Snapshot, sel: Selection, kid: int) -> dict[str, Any]:
    row = find_kernel(_loaded(snap).kernels, kid)
    if row is None:
        raise not_found(f"no kernel with id {kid}", param="id")
    add_short(row)
    return {"state": "ready", "selection": sel.echo, "kernel": row}


def roofline_points(snap: Snapshot, sel: Selection, scope: str, group: bool, limit: int) -> dict[str, Any]:
    out = roofline(_loaded(snap), scope=scope, group=group, limit=limit)
    for p in out["points"]:
        add_short(p)
    out.update({"state": "ready", "selection": sel.echo})
    return out


def compare(
    base: tuple[Optional[Snapshot], Selection, Optional[Pending]],  # selection.fetch_state
    new: tuple[Optional[Snapshot], Selection, Optional[Pending]],
) -> tuple[dict[str, Any], int]:
    """(body, status) of ``/compare``: the engine's comparison (compare.py, as ``tb-attention
    compare`` computes it) once both sides are analysed; their states until then."""
    (b, bsel, bpend), (n, nsel, npend) = base, new
    echo = {"base": bsel.echo, "new": nsel.echo}
    if b is None or n is None:
        states = {
            "base": b.state if b else (bpend.state if bpend else "loading"),
            "new": n.state if n else (npend.state if npend else "loading"),
        }
        if "error" in states.values() or "incomplete" in states.values():
            errs = {k: p.body.get("error") for k, p in (("base", bpend), ("new", npend)) if p is not None}
            return {"state": "error", "states": states, "errors": errs, "selection": echo}, 200
        return {"state": "loading", "states": states, "selection": echo}, 202
    from ..compare import compare_reports  # the engine: imported when first used

    out = compare_reports(dict(_summary(b), kernels=_loaded(b).kernels), dict(_summary(n), kernels=_loaded(n).kernels))
    out.update({"state": "ready", "selection": echo})
    return out, 200


def memory(snap: Snapshot, sel: Selection) -> dict[str, Any]:
    """The report's ``memory`` block (memory/; docs/report-schema.md)."""
    s = _summary(snap)
    return {
        "state": "ready",
        "selection": sel.echo,
        "memory": s.get("memory"),
        "boundary": s.get("boundary"),  # model.py's FFN boundary, shown beside the memory view
        "attention_time_us": s.get("attention_time_us"),
        "steps": s.get("steps") or [],
        "step": s.get("step"),
    }


def report_download(snap: Snapshot, sel: Selection) -> tuple[Iterator[bytes], str]:
    """(streamed JSON envelope, file name) of the full report, as the CLI writes it."""
    from ..jsonout import iter_json

    data = iter_json({"traces": [_loaded(snap).report()]})
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", sel.echo["file"])[:120] or "trace"
    if sel.step:
        base += "." + re.sub(r"[^A-Za-z0-9]+", "", sel.step)
    return data, f"{base}.report.json"


def annotated_download(
    info: FileInfo, snap: Snapshot, logdir: str, max_bytes: int
) -> tuple[Iterator[bytes], str, bool]:
    """(body, file name, gzip) of the trace with attention phases as timeline tracks
    (annotate.py). The only answer that reads a trace at request time: the file (or a directory
    above it) may have been swapped for a symlink out of the logdir since the last scan."""
    from ..annotate import AnnotateError, annotated_name, build_events, kernel_rows, locate, splice

    if not still_inside(info, logdir):
        raise not_found("no such trace file")
    try:
        st = os.stat(info.abspath)
    except OSError:
        raise not_found("the trace file is gone") from None
    if (st.st_size, st.st_mtime_ns) != (info.size, info.mtime_ns):
        raise HttpError(409, "the trace changed since it was analysed; try again in a few seconds")
    try:
        close_at, entries, pids = locate(info.abspath, max_bytes)
    except AnnotateError as e:
        raise HttpError(409, f"cannot annotate this trace: {e}") from None
    events, _ = build_events(kernel_rows(_loaded(snap).report()), pids)
    gz = info.name.endswith(".gz")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", annotated_name(info.name))[:160] or "trace.attention.json"
    return splice(info.abspath, close_at, entries, events, gz, max_bytes), name, gz


def replay_script(snap: Snapshot, sel: Selection) -> tuple[str, str]:
    """(text, file name) of the replay script of the trace's attention calls (replay/emit.py), built
    from the report: the same script ``tb-attention replay --emit`` writes."""
    from ..replay import emit

    calls = ((_loaded(snap).report().get("replay") or {}).get("calls")) or []
    if not calls:
        raise HttpError(409, "this trace has no attention call a replay can rebuild (see tb-attention replay --list)")
    text = emit.script(emit.payload([(sel.info.name, calls)]))
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", sel.info.name)[:160] or "trace"
    return text, f"{base}.replay.py"
