"""The dashboard's comparison is the engine's: :func:`tb_attention_plugin.compare.compare_reports`
(the ``/compare`` route calls it with both reports' summaries and kernel tables). Kept as an
alias for callers of ``server.compare.compare``."""
from __future__ import annotations

from ..compare import compare_reports


def compare(base: dict, new: dict) -> dict:
    """Per-(phase, direction) rows, totals, sections, kernel groups: see docs/report-schema.md."""
    return compare_reports(base, new)
