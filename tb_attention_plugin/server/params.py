"""Validation of route parameters and the JSON responses of the routes.

Names of runs, workers, spans and files are only ever *looked up* in the table that discovery
built; they are never joined into a path. Still, anything that looks like a path trick is
refused with 400 before the lookup, so that probes get a clear answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Optional
from urllib.parse import unquote

from werkzeug.wrappers import Response

from ..jsonout import to_json

MAX_NAME = 1024
_CTRL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


class HttpError(Exception):
    def __init__(self, code: int, message: str, **extra):
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def bad(message: str, **extra) -> HttpError:
    return HttpError(400, message, **extra)


def not_found(message: str, **extra) -> HttpError:
    return HttpError(404, message, **extra)


def json_response(data, code: int = 200, headers: Optional[list] = None) -> Response:
    """JSON body; ``data`` may also be an iterable of encoded chunks (streamed)."""
    body = to_json(data) if not isinstance(data, Iterator) else data
    h = [("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache, must-revalidate"), ("Expires", "0")]
    h.extend(headers or [])
    return Response(body, status=code, headers=h, content_type="application/json")


def error_response(err: HttpError) -> Response:
    return json_response({"error": err.message, "status": err.code, **err.extra}, code=err.code)


def _is_trick(v: str) -> Optional[str]:
    if len(v) > MAX_NAME:
        return "too long"
    if _CTRL.search(v):
        return "control characters"
    if "\\" in v:
        return "backslash"
    if v.startswith(("/", "~")) or _DRIVE.match(v):
        return "absolute path"
    if ".." in v.split("/"):
        return "parent directory reference"
    return None


def name_param(args, key: str, required: bool = False, what: Optional[str] = None) -> Optional[str]:
    """A run/worker/span/file name: plain text, no path tricks (also after one more decoding)."""
    vals = args.getlist(key)
    if len(vals) > 1:
        raise bad(f"'{key}' given more than once")
    v = vals[0] if vals else None
    if v is None or v == "":
        if required:
            raise bad(f"missing parameter '{key}'")
        return None
    for candidate in (v, unquote(v), unquote(unquote(v))):
        why = _is_trick(candidate)
        if why:
            raise bad(f"invalid {what or key} name ({why})", param=key)
    return v


def int_param(args, key: str, default: int, lo: int, hi: int) -> int:
    v = args.get(key)
    if v is None or v == "":
        return default
    try:
        n = int(v, 10)
    except ValueError:
        raise bad(f"'{key}' must be an integer", param=key) from None
    if n < lo or n > hi:
        raise bad(f"'{key}' must be between {lo} and {hi}", param=key)
    return n


def choice_param(args, key: str, choices: Iterable[str], default: Optional[str] = None) -> Optional[str]:
    v = args.get(key)
    if v is None or v == "":
        return default
    choices = tuple(choices)
    if v not in choices:
        raise bad(f"'{key}' must be one of: {', '.join(choices)}", param=key)
    return v


def list_param(args, key: str, choices: Iterable[str]) -> Optional[list]:
    """Comma-separated values (or the parameter repeated), each one of ``choices``."""
    raw = [p for v in args.getlist(key) for p in v.split(",") if p != ""]
    if not raw:
        return None
    choices = tuple(choices)
    for p in raw:
        if p not in choices:
            raise bad(f"'{key}': unknown value (use {', '.join(choices)})", param=key)
    return sorted(set(raw))


def bool_param(args, key: str, default: bool) -> bool:
    v = args.get(key)
    if v is None or v == "":
        return default
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise bad(f"'{key}' must be 0 or 1", param=key)


def text_param(args, key: str, max_len: int = 200) -> str:
    v = args.get(key) or ""
    if len(v) > max_len:
        raise bad(f"'{key}' is longer than {max_len} characters", param=key)
    if _CTRL.search(v):
        raise bad(f"'{key}' contains control characters", param=key)
    return v.strip()


_STEP = re.compile(r"^(?:ProfilerStep#)?(\d{1,12})$")


def step_param(args, key: str) -> Optional[str]:
    """``3`` or ``ProfilerStep#3`` -> ``ProfilerStep#3``; empty or ``all`` -> None."""
    v = args.get(key)
    if v is None or v == "" or v == "all":
        return None
    m = _STEP.match(v)
    if not m:
        raise bad(f"'{key}' must be a step number or 'ProfilerStep#N'", param=key)
    return f"ProfilerStep#{int(m.group(1))}"
