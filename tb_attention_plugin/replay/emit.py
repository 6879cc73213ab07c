"""The replay script: :mod:`.runner`'s source with the calls of one or more traces in it.

The script is self-contained (Python and torch only) and carries nothing but shapes, strides,
dtypes and flags, so it can be attached to a bug report. Calls that several traces share (the
same id) are timed once and written into each trace's ``<trace file>.replay.json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .. import __version__
from .calls import merge_call

_MARKER = "PAYLOAD = None  # the calls: replay/emit.py writes them here\n"
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")


def payload(traces: list[tuple[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """``{"traces": [{"file", "calls": [ids]}], "calls": [...]}`` from (trace file name, calls)."""
    calls: dict[str, dict[str, Any]] = {}
    out = []
    for name, cs in traces:
        out.append({"file": os.path.basename(name), "calls": [c["id"] for c in cs]})
        for c in cs:
            merge_call(calls, c)
    return {"tool": f"tb-attention {__version__}", "traces": out, "calls": list(calls.values())}


def _literal(obj: Any) -> str:
    """``obj`` as a Python literal that reads like JSON (the names true/false/null are defined
    just before it in the script)."""
    return json.dumps(obj, indent=1, sort_keys=False, ensure_ascii=True, allow_nan=False)


def script(pl: dict[str, Any]) -> str:
    """The text of the replay script for a payload."""
    with open(RUNNER, encoding="utf-8") as f:
        src = f.read()
    if _MARKER not in src:  # pragma: no cover - the runner and this module change together
        raise RuntimeError("replay runner without its payload marker")
    head = src.split("\n", 3)
    body = src.replace(
        _MARKER, "true, false, null = True, False, None\nPAYLOAD = " + _literal(pl) + "\ndel true, false, null\n"
    )
    # the runner's first lines are comments about the package; the script says what it replays
    files = ", ".join(t["file"] for t in pl["traces"])
    lines = body.split("\n")
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    del head
    top = (
        "#!/usr/bin/env python3\n"
        f"# Written by `tb-attention replay --emit` ({pl.get('tool')}) from: {files}\n"
        f"# {len(pl['calls'])} distinct attention call(s). Needs only Python and PyTorch; shares only shapes.\n"
        "# Run it on the machine with the GPU; put the .replay.json it writes beside the trace.\n"
    )
    return top + "\n".join(lines)
