"""What the web server enforces before any page or callback runs: a token (when configured),
request body limits, and browser security headers.

* **Token.** ``serve --token-file FILE`` (or ``FACTORYFLOOR_TOKEN``) makes every request need it:
  API clients send ``Authorization: Bearer <token>``; a browser signs in once at ``/login`` and
  gets an HttpOnly, SameSite=Strict cookie holding an HMAC of the token (never the token).
  Without a token nothing changes, which is the loopback-only default.
* **Body limits.** Dash's callback requests (and the sign-in form) are small; anything over
  ``MAX_DASH_BODY`` (or a POST that does not declare its length) is refused with 413/411 before
  it is read, and a JSON body nested too deeply to parse with 400. The ingest API under
  ``/api/v1/`` checks its own limits.
* **Host.** A request must name this server in its ``Host`` header: an IP address, ``localhost``,
  this machine's own names when it listens beyond loopback, or a name given with
  ``--allowed-host``. A page on a foreign name that re-resolves to 127.0.0.1 (DNS rebinding)
  is refused with 421, so it can neither read the dashboard nor post to the ingest API.
* **Header size.** Headers over ``MAX_HEADER_BYTES`` in all get 431, in JSON like every other
  error (the WSGI server's own, higher limit would answer in plain text).
* **Headers.** No sniffing, no framing, no referrer, and a Content-Security-Policy that allows
  scripts, styles and connections from this origin only, and no ``eval`` (Dash's renderer
  needs inline scripts; Plotly needs blob:/data: images for its PNG export; see
  docs/security-and-serving.md).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import json
import logging
import socket
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from dash.exceptions import DependencyException
from flask import Flask, Response, redirect, request
from werkzeug.exceptions import HTTPException

from telemetry.ingest.http import LogThrottle

log = logging.getLogger("factoryfloor.guard")
_throttle = LogThrottle(log)

MAX_DASH_BODY = 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_PATTERN_ITEMS = 10_000  # components one pattern input may match
COOKIE = "ff_session"
_OWN_BODIES = ("ingest_api", "factoryfloor_labels")  # blueprints that read their own bodies
_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)
_LOGIN = """<!DOCTYPE html><html lang="en" data-bs-theme="dark"><head><meta charset="utf-8">
<title>Factory Floor: sign in</title><link rel="stylesheet" href="/assets/00-bootstrap.min.css">
</head><body class="p-5"><main style="max-width:28rem">
<h1 class="h4 mb-3">Factory Floor</h1><p>This dashboard needs its access token.</p>{error}
<form method="post" action="/login"><input class="form-control mb-2" type="password"
name="token" autocomplete="current-password" aria-label="Access token" autofocus>
<input type="hidden" name="next" value="{next}">
<button class="btn btn-primary" type="submit">Sign in</button></form></main></body></html>"""


SESSION_S = 12 * 3600


def _session_value(token: str, issued: int) -> str:
    """``<issued>.<HMAC(token, issued)>``: proves the token was given at ``issued`` (unix s)
    without holding it; the server refuses it after ``SESSION_S``."""
    mac = hmac.new(token.encode(), f"factoryfloor-session:{issued}".encode(), hashlib.sha256)
    return f"{issued}.{mac.hexdigest()}"


def _session_ok(token: str, cookie: str) -> bool:
    issued, _, _ = cookie.partition(".")
    if not issued.isdigit() or not 0 <= time.time() - int(issued) <= SESSION_S:
        return False
    return hmac.compare_digest(cookie.encode(), _session_value(token, int(issued)).encode())


def _safe_next(target: str | None) -> str:
    """Only a path on this server: no open redirect via ?next=. Browsers and Werkzeug drop
    tabs and newlines and read a backslash as a slash, so ``/\t/evil.example`` would become
    ``//evil.example``: any control character, whitespace or backslash sends you home."""
    if (
        not target
        or len(target) > 2048
        or not target.startswith("/")
        or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in target)
    ):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or target.startswith("//"):
        return "/"
    return target


def body_limit(path: str) -> int:
    """The most a request to ``path`` may declare: each endpoint's own limit (the ingest API's,
    remote_write's, the operator API's), the dashboard's for the rest. The WSGI server reads
    no body over it (``app.wsgi``): the endpoint refuses it from its headers alone."""
    from telemetry.ingest.http import Limits
    from telemetry.ingest.remote_write import MAX_BODY
    from telemetry.label_api import MAX_LABEL_BODY

    if not path.startswith("/api/v1/"):
        return MAX_DASH_BODY
    if path == "/api/v1/scrape":
        return Limits.round_body
    if path == "/api/v1/write":
        return MAX_BODY
    if path.startswith(("/api/v1/interruptions/label", "/api/v1/alerts/", "/api/v1/goodput/")):
        return MAX_LABEL_BODY
    return Limits.json_body


def allowed_hosts(bound: str, extra: Collection[str] = ()) -> frozenset[str]:
    """The host names a server bound to ``bound`` answers to, besides any IP address:
    ``localhost``, the names given, and this machine's own names when it listens beyond
    loopback (lower case, without a port)."""
    names = {"localhost", *(n.strip().lower().rstrip(".") for n in extra if n.strip())}
    if not _is_loopback(bound):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        if not _is_ip(bound):
            names.add(bound.lower())
    return frozenset(names)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def host_refused(host_header: str, allowed: Collection[str]) -> str | None:
    """Why a ``Host`` header names another server (None: it names this one)."""
    name = host_header.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[: name.find("]") + 1] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    name = name.rstrip(".")
    if _is_ip(name) or name in allowed:
        return None
    shown = "".join(c if c.isprintable() else "?" for c in name[:80])
    return (
        f"this server does not answer to the host name {shown!r} (DNS rebinding is refused); "
        "start it with --allowed-host NAME to allow that name"
    )


def _headers_size() -> int:
    return sum(len(k) + len(v) + 4 for k, v in request.headers.items())


def install(
    server: Flask, token: str | None, hosts: Collection[str] = frozenset({"localhost"})
) -> None:
    """The token, body, host and header checks before every request, and the security
    headers after it (see the module's docstring). ``hosts``: ``allowed_hosts(...)``."""

    def authorised() -> bool:
        if token is None:
            return True
        bearer = request.headers.get("Authorization", "")
        if hmac.compare_digest(bearer.encode(), f"Bearer {token}".encode()):
            return True
        return _session_ok(token, request.cookies.get(COOKIE, "")[:200])

    def unauthorised() -> Response | None:
        path = request.path
        if token is None or path == "/login" or path.startswith("/assets/00-bootstrap"):
            return None
        if authorised():
            return None
        if request.blueprint == "ingest_api":
            return None  # the ingest API answers 401 itself, in its own JSON
        if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
            return redirect(f"/login?next={request.full_path.rstrip('?')}", code=303)
        return _error(401, "sign in at /login or send Authorization: Bearer <token>")

    @server.before_request
    def _guard() -> Response | None:
        if _headers_size() > MAX_HEADER_BYTES:
            return _error(431, f"request headers over {MAX_HEADER_BYTES:,} bytes in all")
        if why := host_refused(request.headers.get("Host", ""), hosts):
            return _error(421, why)
        # The ingest and corrections APIs check their own bodies (their own limits and JSON
        # errors), after taking a write slot: a slow body then holds a slot, and the cap on
        # writes in flight bounds how many can (reading it here would bypass the cap).
        posted = request.blueprint not in _OWN_BODIES and request.method in ("POST", "PUT", "PATCH")
        if posted and (refused := _body_refused()):
            return refused
        if refused := unauthorised():
            return refused
        if not posted:
            return None
        return _json_refused() or _envelope_refused(server)

    @server.route("/login", methods=["GET", "POST"])
    def _login() -> Response:
        nxt = _safe_next(request.values.get("next"))
        if token is None:
            return redirect(nxt, code=303)
        error = ""
        if request.method == "POST":
            given = request.form.get("token", "")
            if hmac.compare_digest(given.encode(), token.encode()):
                resp = redirect(nxt, code=303)
                behind_tls = request.headers.get("X-Forwarded-Proto", "").lower() == "https"
                resp.set_cookie(
                    COOKIE,
                    _session_value(token, int(time.time())),
                    httponly=True,
                    samesite="Strict",
                    secure=request.is_secure or behind_tls,
                    max_age=SESSION_S,
                )
                return resp
            error = '<div class="alert alert-danger" role="alert">Wrong token.</div>'
        page = _LOGIN.format(error=error, next=html.escape(nxt, quote=True))
        return Response(page, status=401 if error else 200, mimetype="text/html")

    @server.after_request
    def _headers(resp: Response) -> Response:
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("X-Frame-Options", "DENY")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        resp.headers.setdefault("Content-Security-Policy", _CSP)
        return resp


DASH_UPDATE = "/_dash-update-component"
_CALLBACKS = "FACTORYFLOOR_CALLBACK_MAP"


def _envelope_refused(server: Flask) -> Response | None:
    callbacks = server.config.get(_CALLBACKS)
    if callbacks is None or not request.path.endswith(DASH_UPDATE):
        return None
    reason = envelope_problem(request.get_json(silent=True), callbacks())
    return _error(400, reason) if reason else None


def install_envelope_check(server: Flask, callback_map: Callable[[], Mapping[str, Any]]) -> None:
    """Answer a callback request that is not a callback envelope, or names an output no
    callback has, with 400 and a short JSON reason, before Dash sees it (Dash answers those
    with a 500 and logs a traceback for each). A callback that fails on the values it was
    sent is a 400 too; anything else that fails is a JSON 500 without details. Either is
    logged in one line, rate-limited (``LogThrottle``)."""

    # Run by ``install``'s guard after the size, token and JSON checks (a body is never read
    # before its length is known to be within the limit).
    server.config[_CALLBACKS] = callback_map
    pages = logging.getLogger("factoryfloor.app")  # app.ui logs a failed page callback there
    if not any(isinstance(f, OneLine) for f in pages.filters):
        pages.addFilter(OneLine(LogThrottle(pages)))

    @server.errorhandler(Exception)
    def _failed(exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return exc  # type: ignore[return-value]  # 404, 405...: Flask's own answer
        kind = type(exc).__name__
        if isinstance(exc, DependencyException):  # /_dash-component-suites/<no such file>
            return _error(404, "no such component file")
        if request.path.endswith(DASH_UPDATE):
            # The envelope matched a callback (checked before): what failed is the callback
            # on these values. The client sent what it cannot use; the log says which, once
            # with its traceback (a bug on odd values stays findable), then rate-limited.
            output = str((request.get_json(silent=True) or {}).get("output", ""))[:120]
            _throttle(logging.WARNING, f"{output}:{kind}", f"callback {output} failed: {kind}", exc)
            return _error(400, f"the callback cannot answer these inputs ({kind})")
        _throttle(logging.ERROR, kind, f"request {request.path[:200]} failed: {kind}", exc)
        return _error(500, "internal error")


class OneLine(logging.Filter):
    """A logged traceback told in one line (its first line, the exception, and where it was
    raised), and each kind of line rate-limited (``LogThrottle``): a page callback that fails
    on every crafted request would otherwise log a whole traceback for each."""

    def __init__(self, throttle: LogThrottle) -> None:
        super().__init__()
        self.throttle = throttle

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        head = lines[0] if lines else ""
        if len(lines) > 1:
            at = [ln.strip() for ln in lines if ln.lstrip().startswith('File "')]
            where = f" ({at[-1]})" if at else ""
            record.msg, record.args = f"{head} {lines[-1].strip()}{where}", None
            record.exc_info = record.exc_text = None
        return self.throttle.allow(f"{record.name}:{head[:100]}", record.levelno)


def envelope_problem(body: Any, callbacks: Mapping[str, Any]) -> str | None:
    """Why ``body`` is not a Dash callback request this app can answer; None when it is.

    Beyond the envelope's own shape, its inputs, state and outputs must match the declared
    callback item for item (the ids and properties a browser sends are the declared ones):
    Dash indexes them positionally and answers any mismatch with a 500."""
    if not isinstance(body, dict):
        return "a callback request is a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or not output:
        return "a callback request names its output"
    outputs = body.get("outputs")
    if not isinstance(outputs, dict | list):
        return "a callback request lists its outputs"
    for key in ("inputs", "state"):
        items = body.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, dict | list) for i in items):
            return f"{key} must be a list of component properties"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return "changedPropIds must be a list of strings"
    if not callbacks:
        return None
    spec = callbacks.get(output)
    if spec is None:
        return "no callback has that output"
    for key in ("inputs", "state"):
        if problem := _items_problem(body.get(key, []), spec.get(key, []), key):
            return problem
    return _outputs_problem(outputs, output, spec)


def _items_problem(items: list[Any], declared: list[dict[str, Any]], key: str) -> str | None:
    if len(items) != len(declared):
        return f"{key} must list the callback's {len(declared)} {key} (got {len(items)})"
    for n, (item, dep) in enumerate(zip(items, declared, strict=True)):
        pattern = str(dep.get("id", "")).startswith("{")
        if not _matches(item, dep["property"], None if pattern else dep["id"]):
            return f"{key}[{n}] is not the callback's {dep['id'][:60]}.{dep['property']}"
    return None


def _matches(item: Any, prop: str, cid: str | None) -> bool:
    """Whether ``item`` is the declared property (``cid`` None: a pattern, whose items are
    objects with dict ids, one or a list of them)."""
    if isinstance(item, list):
        return cid is None and len(item) <= MAX_PATTERN_ITEMS and all(
            _matches(i, prop, None) for i in item
        )
    if not isinstance(item, dict) or item.get("property") != prop:
        return False
    if cid is None:
        return isinstance(item.get("id"), dict) and _plain(item["id"])
    return item.get("id") == cid


def _plain(cid: dict[Any, Any]) -> bool:
    """A pattern id as a browser sends it: string keys, scalar values."""
    return all(isinstance(v, str | int | float | bool) for v in cid.values())


def _outputs_problem(outputs: Any, output: str, spec: Mapping[str, Any]) -> str | None:
    if spec.get("no_output"):
        return None
    declared = output[2:-2].split("...") if output.startswith("..") else [output]
    given = outputs if output.startswith("..") else [outputs]
    if not isinstance(given, list) or len(given) != len(declared):
        return f"outputs must list the callback's {len(declared)} outputs"
    for n, (item, name) in enumerate(zip(given, declared, strict=True)):
        # ``allow_duplicate`` outputs are declared ``id.prop@<hash>`` and sent with the
        # property ``prop@<hash>``: the suffix is part of the property both sides name.
        base, at, dup = name.partition("@")
        cid, prop = base.rsplit(".", 1)
        if not _matches(item, prop + at + dup, None if cid.startswith("{") else cid):
            return f"outputs[{n}] is not the callback's {name[:60]}"
    return None


def _body_refused() -> Response | None:
    """411/413 before a byte of the body is read."""
    length = request.content_length
    if length is None:
        return _error(411, "the request must declare its Content-Length")
    if length > MAX_DASH_BODY:
        return _error(413, f"body of {length:,} bytes is over the {MAX_DASH_BODY:,} limit")
    return None


def _json_refused() -> Response | None:
    """Parse a JSON body here, once (Flask caches it for Dash's own ``get_json``): JSON nested
    thousands deep ends in a RecursionError, which Dash would answer with a bare 500."""
    if not request.is_json:
        return None
    try:
        request.get_json(silent=True)
    except RecursionError:
        return _error(400, "the JSON body is nested too deeply")
    return None


def _error(status: int, reason: str) -> Response:
    return Response(json.dumps({"error": reason}), status=status, mimetype="application/json")
