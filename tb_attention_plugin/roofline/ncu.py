"""Parse Nsight Compute ``--csv --page raw`` output into one dict per kernel.

The raw page is a CSV whose first row names the columns (identity columns such
as ``ID``, ``Kernel Name``, ``Block Size`` followed by one column per metric),
whose second row gives each column's unit (empty for identity columns), and
whose remaining rows are one profiled kernel each.  Numbers may carry
thousands separators (``"1,048,576"``) and some cells are ``n/a``.  Output
captured from ncu's stdout may also hold ``==PROF==``/``==WARNING==`` lines and
the profiled program's own prints before the header; those are skipped.

    >>> table = parse(open("report.csv").read())
    >>> table.rows[0]["gpu__time_duration.sum"], table.units["gpu__time_duration.sum"]
    (12345.0, 'nsecond')
    >>> rows = kernels("report.csv", base_units=True)   # times in seconds, bytes in bytes

Used by the engine (:mod:`.measured` joins an export beside a trace to its kernels) and by
``validation/`` (``validation/ncu_csv.py`` re-exports this module). Only the standard library
is used, so it runs anywhere the engine runs.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from ..attention.patterns import strip_templates
from ..trace import sidecars as _side

# identity columns (never converted to numbers, never scaled)
IDENTITY_COLUMNS = {
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Section Name",
    "Metric Name",
    "Metric Unit",
}
# columns that are numbers even though they are identity-like
INT_IDENTITY_COLUMNS = {"ID", "Process ID", "Context", "Stream", "Device"}

_NUM_RE = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?$")
_NA = {"", "n/a", "N/A", "nan", "NaN", "-"}

# SI prefixes as ncu prints them (Kbyte, Mbyte, usecond, msecond, Ghz, ...)
_PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
# short spellings that `--print-units base` uses (seen with ncu 2025.3: 'ns', 'byte/s')
_SHORT = {
    "ns": (1e-9, "second"),
    "us": (1e-6, "second"),
    "ms": (1e-3, "second"),
    "s": (1.0, "second"),
    "B": (1.0, "byte"),
    "KB": (1e3, "byte"),
    "MB": (1e6, "byte"),
    "GB": (1e9, "byte"),
    "TB": (1e12, "byte"),
}
_BASE_UNITS = (
    "byte",
    "second",
    "cycle",
    "hz",
    "inst",
    "warp",
    "thread",
    "block",
    "sector",
    "request",
    "wavefront",
    "register",
    "flop",
)


@dataclass
class NcuTable:
    columns: list[str]
    units: dict[str, str]
    rows: list[dict[str, object]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def metric_columns(self) -> list[str]:
        return [c for c in self.columns if c not in IDENTITY_COLUMNS]


def to_number(cell: str) -> Union[float, int, str, None]:
    """'1,234.5' -> 1234.5, '42' -> 42, 'n/a' -> None, anything else unchanged."""
    s = cell.strip()
    if s in _NA:
        return None
    if _NUM_RE.match(s) and any(ch.isdigit() for ch in s):
        t = s.replace(",", "")
        if re.match(r"^[+-]?\d+$", t):
            return int(t)
        return float(t)
    return cell


def unit_scale(unit: str) -> tuple[float, str]:
    """Factor that converts a value in ``unit`` to its base unit, and that base.

    'Kbyte' -> (1e3, 'byte'); 'usecond' -> (1e-6, 'second'); 'Gbyte/second' ->
    (1e9, 'byte/second'); 'nsecond' -> (1e-9, 'second'); '%' -> (1, '%').
    Unknown units are returned unchanged with factor 1.
    """
    u = (unit or "").strip()
    if not u:
        return 1.0, u
    if "/" in u:
        num, den = u.split("/", 1)
        fn, bn = unit_scale(num)
        fd, bd = unit_scale(den)
        return fn / fd, f"{bn}/{bd}"
    if u in _SHORT:
        return _SHORT[u]
    low = u.lower()
    if low in ("hz", "khz", "mhz", "ghz"):
        return {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}[low], "hz"
    for base in _BASE_UNITS:
        if u.endswith(base):
            pre = u[: -len(base)]
            if pre in _BINARY:
                return _BINARY[pre], base
            if pre in _PREFIX:
                return _PREFIX[pre], base
    return 1.0, u


def _find_header(lines: list[str]) -> int:
    for i, ln in enumerate(lines):
        s = ln.lstrip("\ufeff").strip()
        if s.startswith('"ID"') or s.startswith("ID,"):
            return i
    raise ValueError('no ncu raw CSV header (a row starting with "ID") found')


def parse(text: str, base_units: bool = False, keep: Optional[Callable[[str], bool]] = None) -> NcuTable:
    """Parse ncu ``--csv --page raw`` text.

    ``base_units=True`` rescales every metric to its base unit (seconds, bytes,
    hz, ...) and updates ``units`` accordingly. ``keep`` (column name -> bool), when
    given, limits the rows to the identity columns and the metric columns it accepts
    (a raw page has ~700 columns; converting only the needed ones is much faster).
    """
    lines = text.splitlines()
    start = _find_header(lines)
    body = "\n".join(ln for ln in lines[start:] if not ln.startswith("=="))
    reader = csv.reader(io.StringIO(body))
    try:
        header = next(reader)
    except StopIteration:  # pragma: no cover
        raise ValueError("empty ncu CSV") from None
    header = [h.lstrip("\ufeff") for h in header]
    wanted = [(i, h) for i, h in enumerate(header) if keep is None or h in IDENTITY_COLUMNS or keep(h)]
    units: dict[str, str] = {h: "" for h in header}
    rows: list[dict[str, object]] = []
    first = True
    for rec in reader:
        if not rec or all(not c.strip() for c in rec):
            continue
        if len(rec) < len(header):
            rec = rec + [""] * (len(header) - len(rec))
        if first:
            first = False
            # the units row: 'ID' (and other identity columns) empty
            if rec[0].strip() == "" and not any(rec[i].strip() for i, h in enumerate(header) if h in ("Kernel Name",)):
                units = {h: rec[i].strip() for i, h in enumerate(header)}
                continue
        row: dict[str, object] = {}
        for i, h in wanted:
            cell = rec[i]
            if h in IDENTITY_COLUMNS and h not in INT_IDENTITY_COLUMNS:
                row[h] = cell
                continue
            v = to_number(cell)
            if base_units and isinstance(v, (int, float)) and units.get(h):
                f, _ = unit_scale(units[h])
                if f != 1.0:
                    v = float(v) * f
            row[h] = v
        rows.append(row)
    if base_units:
        units = {h: (unit_scale(u)[1] if u else u) for h, u in units.items()}
    return NcuTable(columns=header, units=units, rows=rows)


def kernels(path_or_text: str, base_units: bool = False) -> list[dict[str, object]]:
    """List of per-kernel dicts from a file path or CSV text."""
    if "\n" not in path_or_text and os.path.exists(path_or_text):
        with open(path_or_text, encoding="utf-8", errors="replace") as f:
            text = f.read()
    else:
        text = path_or_text
    return parse(text, base_units=base_units).rows


def is_marker(row: dict[str, object]) -> bool:
    """The per-workload separator kernel launched by validation/ncu_step.py (torch.cuda._sleep)."""
    n = str(row.get("Kernel Name", ""))
    return "spin_kernel" in n


def split_by_marker(
    rows: Iterable[dict[str, object]], names: list[str], marker: Callable[[dict[str, object]], bool] = is_marker
) -> dict[str, list[dict[str, object]]]:
    """Assign rows to workloads: each marker row starts the next workload in ``names``.

    Rows before the first marker are put under ``"_unassigned"``.  Marker rows
    themselves are dropped.
    """
    out: dict[str, list[dict[str, object]]] = {}
    idx = -1
    for r in rows:
        if marker(r):
            idx += 1
            key = names[idx] if idx < len(names) else f"_extra_{idx}"
            out.setdefault(key, [])
            continue
        key = names[idx] if 0 <= idx < len(names) else ("_unassigned" if idx < 0 else f"_extra_{idx}")
        out.setdefault(key, []).append(r)
    return out


def nvtx_column(columns: Iterable[str]) -> Optional[str]:
    """Name of the NVTX context column that ``ncu --nvtx`` adds, if any."""
    for c in columns:
        if "nvtx" in c.lower() or "push/pop" in c.lower() or "push_pop" in c.lower():
            return c
    return None


def is_raw_page(head: str) -> bool:
    """Whether text (the first KB of a file) is an ncu raw page: a header row starting with
    ``"ID"`` that names a ``Kernel Name`` column and at least one metric (``unit__counter...``)."""
    for ln in head.splitlines()[:200]:
        s = ln.lstrip("\ufeff").strip()
        if s.startswith('"ID"') or s.startswith("ID,"):
            return "Kernel Name" in s and "__" in s
    return False


def sniff(path: str, nbytes: int = 1 << 16) -> bool:
    """Cheap check of a file's first bytes with :func:`is_raw_page`."""
    try:
        with open(path, "rb") as f:
            head = f.read(nbytes)
    except OSError:
        return False
    return is_raw_page(head.decode("utf-8", errors="replace"))


def read(path: str, base_units: bool = True, max_bytes: int = 1 << 30) -> NcuTable:
    """Parse an export file (``ValueError`` if it is larger than ``max_bytes`` or not a raw page)."""
    size = os.path.getsize(path)
    if size > max_bytes:
        raise ValueError(f"{os.path.basename(path)}: {size} bytes, more than the {max_bytes} allowed")
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse(f.read(), base_units=base_units)


# -- exports beside a trace: found by trace/sidecars.py (the one home for files beside a trace) --

is_sidecar_name = _side.is_ncu_name
sidecar_stems = _side.ncu_stems
sidecar_files = _side.ncu_files


def sidecar_signature(trace_path: str) -> str:
    """Identity of the exports beside a trace, for cache keys ('' when there are none)."""
    side = sidecar_files(trace_path)
    return "" if not side else "\0ncu:" + repr(side)


def short_name(kernel_name: str) -> str:
    """Function name without return type, namespaces, template args and parameters.

    'void at::native::vectorized_elementwise_kernel<4, X>(int, X)' -> 'vectorized_elementwise_kernel'
    """
    s = kernel_name.strip()
    # drop parameter list (last balanced (...) at the end)
    depth = 0
    cut = len(s)
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    if s.endswith(")"):
        s = s[:cut]
    s = strip_templates(s).strip()
    s = s.split(" ")[-1] if " " in s else s
    return s.split("::")[-1]


if __name__ == "__main__":  # pragma: no cover
    import json
    import sys

    t = parse(open(sys.argv[1]).read(), base_units="--base" in sys.argv)
    print(json.dumps({"units": t.units, "rows": t.rows}, indent=1, default=str))
