"""Every ``TB_ATTENTION_*`` environment variable, read here and nowhere else.

The engine (``trace/``, ``roofline/``, ``attention/``, ``report``, ``memory``, ``advice``) reads
no environment: what changes an analysis travels in :class:`~.options.Options`, built here for
the command line and the TensorBoard plugin alike. :data:`SETTINGS` is the one table of
variables; each row names the field it sets, its parser and the command-line flag (if any) that
overrides it, so a new setting is one row (plus its field on ``Options`` or ``Settings``).

The rules, the same for both faces:

* the environment gives the defaults; a command-line flag overrides its variable;
* a bad value in the environment is a warning and the default is used (it must never stop
  TensorBoard or a CI script that merely inherits the variable); a bad command-line value is an
  error (``error: --max-bytes: ...``, exit 2);
* sizes go through :func:`parse_size` and durations through :func:`parse_duration`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .options import Options

PROGRESS_FD = "TB_ATTENTION_PROGRESS_FD"  # internal: the progress record a worker process writes (progress.py)

_SIZE_UNITS = (
    ("KIB", 1 << 10),
    ("MIB", 1 << 20),
    ("GIB", 1 << 30),
    ("TIB", 1 << 40),
    ("KB", 1 << 10),
    ("MB", 1 << 20),
    ("GB", 1 << 30),
    ("TB", 1 << 40),
    ("K", 1 << 10),
    ("M", 1 << 20),
    ("G", 1 << 30),
    ("T", 1 << 40),
    ("B", 1),
)
_DURATION_UNITS = (("MS", 1e-3), ("S", 1.0), ("M", 60.0), ("H", 3600.0))
_TRUE = ("1", "true", "yes", "on")


def parse_size(text: str, allow_zero: bool = False) -> int:
    """``16G``, ``16GB``, ``16GiB``, ``512M``, ``1.5G``, ``1048576`` -> bytes.

    Units are binary whatever their spelling (``1G`` = ``1GB`` = ``1GiB`` = 2**30 bytes), case
    does not matter, a bare number is bytes. A size is at least one byte: 0 is refused unless
    ``allow_zero`` (where 0 has a meaning), negative, NaN and infinite sizes always. ValueError
    with a one-line reason otherwise.
    """
    t = str(text).strip().upper()
    mult = 1
    for suffix, m in _SIZE_UNITS:
        if t.endswith(suffix):
            mult, t = m, t[: -len(suffix)].strip()
            break
    try:
        v = float(t) * mult
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 4G, 512M)") from None
    if not math.isfinite(v) or v < 0 or (v < 1 and not (allow_zero and v == 0)):
        raise ValueError(f"not a positive size: {text!r}")
    return int(v)


def parse_duration(text: str) -> float:
    """``3``, ``2.5s``, ``500ms``, ``1m``, ``1h`` -> seconds (a bare number is seconds). Positive
    and finite; ValueError with a one-line reason otherwise."""
    t = str(text).strip().upper()
    mult = 1.0
    for suffix, m in _DURATION_UNITS:
        if t.endswith(suffix):
            mult, t = m, t[: -len(suffix)].strip()
            break
    try:
        v = float(t) * mult
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (e.g. 3, 500ms, 2s)") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return v


def _in_range(parse: Callable[[str], Any], lo: float, hi: float) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        v = parse(text)
        if not lo <= v <= hi:
            raise ValueError(f"{text!r} is out of range [{lo:g}, {hi:g}]")
        return v

    return check


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None


def _mebibytes(text: str) -> int:
    return _in_range(_int, 16, 1 << 20)(text) << 20


def _choice(*allowed: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{text!r} must be {' or '.join(allowed)}")
        return text

    return check


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as e:
        raise ValueError(f"invalid regex: {e}") from None
    return text


def _peaks(text: str) -> dict:
    from .roofline.devices import load_user_peaks  # reads a JSON file when given one

    try:
        return load_user_peaks(text)
    except OSError as e:
        raise ValueError(str(e.strerror or e)) from None


def _flag(text: str) -> bool:
    return str(text).strip().lower() in _TRUE


def _path(text: str) -> str:
    return os.path.expanduser(text)


@dataclass(frozen=True)
class Setting:
    """One environment variable: the field it sets (``options.X`` for analysis options), how
    its text is parsed (ValueError: a one-line reason), the command-line flag that overrides it."""

    env: str
    field: str
    parse: Callable[[str], Any]
    default: str  # as shown in warnings and docs
    flag: Optional[str] = None
    plugin_only: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("TB_ATTENTION_PEAKS", "options.user_peaks", _peaks, "the built-in table", "--peaks"),
    Setting(
        "TB_ATTENTION_PEAK_BASIS", "options.peak_basis", _choice("measured", "datasheet"), "measured", "--peak-basis"
    ),
    Setting("TB_ATTENTION_MODULE_PATTERN", "options.module_pattern", _regex, "the default", "--module-pattern"),
    Setting(
        "TB_ATTENTION_ANNOTATION_PATTERN", "options.annotation_pattern", _regex, "the default", "--annotation-pattern"
    ),
    Setting("TB_ATTENTION_MAX_BYTES", "options.max_bytes", parse_size, "16 GiB", "--max-bytes"),
    Setting("TB_ATTENTION_JOBS", "options.read_jobs", _in_range(_int, 1, 256), "up to 2 processes"),
    Setting(
        "TB_ATTENTION_PARALLEL_MIN_BYTES",
        "options.parallel_min_bytes",
        lambda t: parse_size(t, allow_zero=True),
        "48 MiB",
    ),
    Setting("TB_ATTENTION_DEBUG", "options.debug", _flag, "off"),
    Setting("TB_ATTENTION_CACHE_DIR", "cache_dir", _path, "~/.cache/tb-attention", "--cache-dir"),
    Setting("TB_ATTENTION_NO_CACHE", "no_cache", _flag, "0", "--no-cache"),
    Setting(
        "TB_ATTENTION_DASK_TIMEOUT",
        "dask_timeout",
        _in_range(parse_duration, 0.1, 3600.0),
        "20 s to connect, 60 s for workers",
    ),
    Setting("TB_ATTENTION_POLL_SECS", "poll_secs", _in_range(parse_duration, 0.2, 3600.0), "3", plugin_only=True),
    Setting("TB_ATTENTION_WORKERS", "workers", _in_range(_int, 1, 32), "1", plugin_only=True),
    Setting("TB_ATTENTION_WORKER_MODE", "worker_mode", _choice("process", "thread"), "process", plugin_only=True),
    Setting("TB_ATTENTION_MEMORY_MB", "memory_budget", _mebibytes, "1024", plugin_only=True),
)
BY_FLAG = {s.flag: s for s in SETTINGS if s.flag}


def default_cache_dir(env: Optional[Mapping[str, str]] = None) -> str:
    """``$XDG_CACHE_HOME/tb-attention`` or ``~/.cache/tb-attention``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tb-attention")


@dataclass(frozen=True)
class Settings:
    """Everything the environment (and, for the CLI, the command line) configures."""

    options: Options = field(default_factory=Options)
    cache_dir: str = field(default_factory=default_cache_dir)
    no_cache: bool = False
    dask_timeout: Optional[float] = None  # ranks --scheduler: connecting, and waiting for workers
    poll_secs: float = 3.0
    workers: int = 1
    worker_mode: str = "process"
    memory_budget: int = 1 << 30
    warnings: tuple[str, ...] = ()

    def loader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~.server.loader.Loader` (besides the logdir and options)."""
        return {
            "poll_secs": self.poll_secs,
            "workers": self.workers,
            "mode": self.worker_mode,
            "memory_budget": self.memory_budget,
            "cache_dir": self.cache_dir,
            "use_cache": not self.no_cache,
        }


def _assign(values: dict[str, Any], base: Settings) -> Settings:
    opts = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("options.")}
    rest = {k: v for k, v in values.items() if not k.startswith("options.")}
    return dataclasses.replace(base, options=dataclasses.replace(base.options, **opts), **rest)


def from_env(env: Optional[Mapping[str, str]] = None, plugin: bool = True) -> Settings:
    """The settings of this process' environment. A bad value becomes a warning (in
    ``Settings.warnings``) and its default; this never raises. ``plugin=False`` (the CLI)
    neither reads nor warns about the plugin's own variables."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for s in SETTINGS:
        if s.plugin_only and not plugin:
            continue
        text = env.get(s.env)
        if text is None or not text.strip():
            continue
        try:
            values[s.field] = s.parse(text)
        except ValueError as e:
            warnings.append(f"{s.env} ignored: {e}; using {s.default}")
    base = Settings(cache_dir=default_cache_dir(env), warnings=tuple(warnings))
    return _assign(values, base)


def with_flags(base: Settings, flags: Mapping[str, Any]) -> Settings:
    """``base`` with the command-line values in ``flags`` (flag -> text; None or False: not
    given) parsed by the same parsers as the environment's. ValueError ``--flag: reason``."""
    values: dict[str, Any] = {}
    for flag, text in flags.items():
        if text is None or text is False:
            continue
        s = BY_FLAG[flag]
        try:
            values[s.field] = True if text is True else s.parse(text)
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None
    return _assign(values, base)
