"""Plugin settings from environment variables (TensorBoard has no per-plugin flags for
entry-point plugins). A bad value is reported and replaced by the default; it never stops
TensorBoard.

==================================  =========================================================
``TB_ATTENTION_PEAKS``              device peaks for an unknown GPU: ``bf16=312,fp32=19.5,memory=1.5``
                                    (TFLOP/s, TB/s) or a JSON file (see ``tb-attention analyze --peaks``)
``TB_ATTENTION_PEAK_BASIS``         ``measured`` (default) or ``datasheet``
``TB_ATTENTION_MODULE_PATTERN``     regex on nn.Module class names that scope attention
``TB_ATTENTION_ANNOTATION_PATTERN`` regex on record_function names that scope attention
``TB_ATTENTION_POLL_SECS``          seconds between scans of the logdir (default 3)
``TB_ATTENTION_WORKERS``            traces analysed at once (default 1)
``TB_ATTENTION_WORKER_MODE``        ``process`` (default: analyses in worker processes) or ``thread``
``TB_ATTENTION_MEMORY_MB``          memory for loaded kernel tables, MB (default 1024)
``TB_ATTENTION_MAX_BYTES``          refuse traces that decompress to more than this (engine)
``TB_ATTENTION_CACHE_DIR``          report cache directory (engine; default ~/.cache/tb-attention)
``TB_ATTENTION_NO_CACHE``           ``1``: do not read or write the on-disk report cache
==================================  =========================================================
"""
from __future__ import annotations

import os
import re

from ..attention import patterns as P
from ..report import Options
from ..roofline import devices as D
from ..trace.reader import max_bytes_from_env


def _num(env, key, default, lo, hi, cast, warnings):
    v = env.get(key)
    if v is None or v.strip() == "":
        return default
    try:
        n = cast(v)
    except ValueError:
        warnings.append(f"{key}={v!r} is not a number; using {default}")
        return default
    if not lo <= n <= hi:
        warnings.append(f"{key}={v!r} is out of range [{lo}, {hi}]; using {default}")
        return default
    return n


def _max_bytes(env, warnings: list) -> int:
    """TB_ATTENTION_MAX_BYTES (``16G``, ``512M``, bytes); a bad value is a warning, not a crash."""
    cap, warn = max_bytes_from_env(env)
    if warn:
        warnings.append(warn)
    return cap


def from_env(env=None) -> tuple[Options, dict, list]:
    """(analysis options, Loader keyword arguments, warnings)."""
    env = os.environ if env is None else env
    warnings: list[str] = []
    peaks = {}
    try:
        peaks = D.load_user_peaks(env.get("TB_ATTENTION_PEAKS") or None) if env.get("TB_ATTENTION_PEAKS") else {}
    except (ValueError, OSError) as e:
        warnings.append(f"TB_ATTENTION_PEAKS ignored: {e}")
    basis = env.get("TB_ATTENTION_PEAK_BASIS", "measured")
    if basis not in ("measured", "datasheet"):
        warnings.append(f"TB_ATTENTION_PEAK_BASIS={basis!r} must be measured or datasheet; using measured")
        basis = "measured"
    pats = {}
    for key, default in (("TB_ATTENTION_MODULE_PATTERN", P.DEFAULT_MODULE_PATTERN),
                         ("TB_ATTENTION_ANNOTATION_PATTERN", P.DEFAULT_ANNOTATION_PATTERN)):
        v = env.get(key) or default
        try:
            re.compile(v)
        except re.error as e:
            warnings.append(f"{key} is not a valid regex ({e}); using the default")
            v = default
        pats[key] = v
    opts = Options(module_pattern=pats["TB_ATTENTION_MODULE_PATTERN"],
                   annotation_pattern=pats["TB_ATTENTION_ANNOTATION_PATTERN"],
                   peak_basis=basis, user_peaks=peaks)
    mode = env.get("TB_ATTENTION_WORKER_MODE", "process")
    if mode not in ("process", "thread"):
        warnings.append(f"TB_ATTENTION_WORKER_MODE={mode!r} must be process or thread; using process")
        mode = "process"
    kw = {
        "poll_secs": _num(env, "TB_ATTENTION_POLL_SECS", 3.0, 0.2, 3600.0, float, warnings),
        "workers": _num(env, "TB_ATTENTION_WORKERS", 1, 1, 32, int, warnings),
        "mode": mode,
        "memory_budget": _num(env, "TB_ATTENTION_MEMORY_MB", 1024, 16, 1 << 20, int, warnings) << 20,
        "max_bytes": _max_bytes(env, warnings),
        "cache_dir": env.get("TB_ATTENTION_CACHE_DIR") or None,
        "use_cache": env.get("TB_ATTENTION_NO_CACHE", "") not in ("1", "true", "yes"),
    }
    return opts, kw, warnings
