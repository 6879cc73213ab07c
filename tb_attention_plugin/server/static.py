"""The dashboard's own files (the committed bundle in ``tb_attention_plugin/static``): only
names listed in that folder are served, never a path built from the request."""

from __future__ import annotations

import mimetypes
import os
import re

from werkzeug.wrappers import Response

from .params import error_response, not_found

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
_CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}


def static_response(path: str) -> Response:
    """The file the last component of ``path`` names, or 404."""
    name = path.rsplit("/", 1)[-1]
    try:
        allowed = set(os.listdir(STATIC_DIR))
    except OSError:
        allowed = set()
    if name not in allowed or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
        return error_response(not_found("no such file"))
    ext = os.path.splitext(name)[1]
    ctype = _CONTENT_TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    with open(os.path.join(STATIC_DIR, name), "rb") as f:
        body = f.read()
    return Response(
        body, content_type=ctype, headers=[("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-cache")]
    )
