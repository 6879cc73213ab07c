"""The committed dashboard bundle and its sources (no Node needed)."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "frontend", "src")
STATIC = os.path.join(ROOT, "tb_attention_plugin", "static")


def _sources():
    for d, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".ts"):
                p = os.path.join(d, f)
                yield p, open(p, encoding="utf-8").read()


def test_bundle_is_committed_and_exports_render():
    js = open(os.path.join(STATIC, "index.js"), encoding="utf-8").read()
    assert re.search(r"export\s*\{[^}]*\brender\b", js), "index.js must export render()"
    assert os.path.getsize(os.path.join(STATIC, "index.css")) > 1000


def test_sources_never_parse_html_from_data():
    """Data goes into the DOM as text only: no innerHTML & co anywhere in the dashboard."""
    banned = re.compile(
        r"\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment"
        r"|DOMParser)\b"
    )
    for path, text in _sources():
        assert not banned.search(text), f"{os.path.relpath(path, ROOT)} uses an HTML-parsing API"


def test_no_request_leaves_the_plugin():
    """Only relative URLs: no http(s)://, protocol-relative or CDN references in sources or bundle."""
    bundle = [
        (os.path.join(STATIC, f), open(os.path.join(STATIC, f), encoding="utf-8").read())
        for f in ("index.js", "index.css")
    ]
    for path, text in list(_sources()) + bundle:
        for m in re.finditer(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I):
            assert m.group(0).endswith("www.w3.org"), f"{os.path.relpath(path, ROOT)}: {m.group(0)}"
        assert "@import" not in text and "url(http" not in text
