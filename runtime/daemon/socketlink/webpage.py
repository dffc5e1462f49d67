"""The browser client's files (``runtime/daemon/web/``, shipped as package data), served by the
socket link with a strict Content-Security-Policy: everything from our own origin, no
inline script or style, no framing, the WebSocket back to ourselves only."""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources

CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
          ".css": b"text/css; charset=utf-8"}
_FILES = ("index.html", "app.js", "app.css")


@dataclasses.dataclass(frozen=True)
class Page:
    content_type: bytes
    body: bytes
    csp: bytes = CSP


@functools.cache
def _load(name: str) -> Page | None:
    resource = importlib.resources.files("runtime.daemon.web").joinpath(name)
    if not resource.is_file():
        return None
    suffix = name[name.rfind("."):]
    return Page(_TYPES[suffix], resource.read_bytes())


def find_page(target: str) -> Page | None:
    """The file a ``GET`` asks for (the query and fragment ignored), or None."""
    path = target.split("?", 1)[0].split("#", 1)[0]
    name = "index.html" if path == "/" else path.lstrip("/")
    return _load(name) if name in _FILES else None
