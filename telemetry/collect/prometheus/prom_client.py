"""A client for the Prometheus HTTP API as Prometheus-compatible servers expose it.

Clusters that outgrow one machine keep their dcgm-exporter series in Prometheus,
VictoriaMetrics (single node, or cluster behind ``/select/<tenant>/prometheus``), Thanos Query
or Mimir; their users will not let a second scraper hit every exporter. ``PromClient`` reads
what such a server already has: ``/federate`` (exposition text) and ``/api/v1/query`` for the
latest values, ``/api/v1/query_range`` for history, ``/api/v1/targets`` for why a target is
down. The server's URL may carry a path prefix (``http://vmselect:8481/select/0/prometheus``,
``http://mimir/prometheus``); every API path is appended to it.

Access as these servers want it: a tenant header (``X-Scope-OrgID``, Mimir/Cortex/Thanos
receive), HTTP basic auth or a bearer token (secrets read from files, never the command line,
where ``ps`` shows them), TLS verified against a CA file. Every failure is one ``PromDown`` with
the reason in words ("connection refused", "HTTP 401 Unauthorized", "not a Prometheus API
answer"), so the source can mark the server down and say why.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from telemetry.ingest.targets import USER_AGENT

MAX_RESPONSE_BYTES = 512 * 2**20  # a query_range chunk is sized to stay far below this
TENANT_HEADER = "X-Scope-OrgID"


class PromDown(Exception):
    """The server did not answer what was asked; the message says why, in words."""


@dataclass(frozen=True)
class PromAccess:
    """How to reach a server: tenant, credentials and the CA that signs its certificate."""

    tenant: str | None = None
    user: str | None = None
    password: str | None = None
    bearer: str | None = None
    ca_file: str | None = None

    def headers(self) -> dict[str, str]:
        out = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"}
        if self.tenant:
            out[TENANT_HEADER] = self.tenant
        if self.bearer:
            out["Authorization"] = f"Bearer {self.bearer}"
        elif self.user is not None:
            pair = f"{self.user}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return out


def read_secret(path: str, what: str) -> str:
    """The first line of a secret file; ValueError naming the file when it is unreadable or
    empty."""
    try:
        with open(path, encoding="utf-8") as fh:
            secret = fh.readline().strip()
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from None
    if not secret:
        raise ValueError(f"{what} {path} is empty")
    return secret


def check_url(url: str) -> str:
    """``url`` without a trailing slash; ValueError for anything not http(s)://host[:port]/..."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--prometheus {url!r} is not an http(s) URL")
    try:
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ValueError(f"--prometheus {url!r}: bad port") from None
    if parts.query or parts.fragment:
        raise ValueError(f"--prometheus {url!r}: give the server's base URL, without ?query")
    return url.strip().rstrip("/")


class PromClient:
    """One server's HTTP API. Thread-compatible (no shared connection state)."""

    def __init__(self, url: str, access: PromAccess | None = None, timeout_s: float = 30.0):
        self.url = check_url(url)
        self.access = access or PromAccess()
        self.timeout_s = timeout_s
        context = None
        if self.url.startswith("https://"):
            context = ssl.create_default_context(cafile=self.access.ca_file)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context),
            _NoRedirect(),
        )

    # -- the API --------------------------------------------------------------------------------
    def federate(self, matches: list[str]) -> str:
        """``/federate``: the latest sample of every series matching any of ``matches``, as
        exposition text (``instance``, ``job`` and the target's labels added)."""
        body, ctype = self._get("/federate", [("match[]", m) for m in matches])
        if ctype and not ctype.startswith(("text/plain", "application/openmetrics-text")):
            raise PromDown(f"/federate answered {ctype[:60]}, not Prometheus text")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise PromDown("/federate answered bytes that are not UTF-8") from None

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        """``/api/v1/query`` at unix time ``at``: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        data = self._api("/api/v1/query", [("query", expr), ("time", _t(at))])
        return _result(data, "vector")

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        """``/api/v1/query_range``: ``[{"metric": {...}, "values": [[t, "v"], ...]}]``."""
        params = [("query", expr), ("start", _t(start)), ("end", _t(end)), ("step", _t(step))]
        params.append(("nocache", "1"))  # VictoriaMetrics: no start rounding, no stale cache
        return _result(self._api("/api/v1/query_range", params), "matrix")

    def target_errors(self) -> dict[tuple[str, str], str]:
        """(instance, job) -> the last scrape error of each active target that has one (empty
        when the server does not list targets: Thanos Query, Mimir)."""
        try:
            data = self._api("/api/v1/targets", [("state", "active")])
        except PromDown:
            return {}
        out = {}
        for t in data.get("activeTargets", []) if isinstance(data, dict) else []:
            labels = t.get("labels") or {}
            if t.get("lastError"):
                out[(labels.get("instance", ""), labels.get("job", ""))] = str(t["lastError"])
        return out

    # -- HTTP -----------------------------------------------------------------------------------
    def _api(self, path: str, params: list[tuple[str, str]]) -> Any:
        body, _ = self._get(path, params)
        try:
            doc = json.loads(body)
        except ValueError:
            raise PromDown(f"{path}: not a Prometheus API answer (not JSON)") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            why = doc.get("error") if isinstance(doc, dict) else None
            raise PromDown(f"{path}: {why or 'not a Prometheus API answer'}"[:300])
        return doc.get("data")

    def _get(self, path: str, params: list[tuple[str, str]]) -> tuple[bytes, str]:
        url = f"{self.url}{path}?{urlencode(params)}"
        req = urllib.request.Request(url, headers=self.access.headers())
        t0 = time.monotonic()
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                raw = _read(resp, path)
                ctype = (resp.headers.get("Content-Type") or "").lower()
                if (resp.headers.get("Content-Encoding") or "").lower() == "gzip":
                    raw = _gunzip(raw, path)
                return raw, ctype
        except urllib.error.HTTPError as exc:
            raise PromDown(_http_error(exc, path)) from None
        except PromDown:
            raise
        except Exception as exc:  # every way a request fails, in words
            raise PromDown(_reason(exc, self.url, time.monotonic() - t0)) from None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer to report (a login page, a moved server), not to follow with
    the credentials attached."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _read(resp: Any, path: str) -> bytes:
    body = resp.read(MAX_RESPONSE_BYTES + 1)
    if len(body) > MAX_RESPONSE_BYTES:
        raise PromDown(f"{path}: answer larger than {MAX_RESPONSE_BYTES:,} bytes")
    return body


def _gunzip(raw: bytes, path: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            body = gz.read(MAX_RESPONSE_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise PromDown(f"{path}: broken gzip answer ({exc})") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise PromDown(f"{path}: answer larger than {MAX_RESPONSE_BYTES:,} bytes decoded")
    return body


def _http_error(exc: urllib.error.HTTPError, path: str) -> str:
    detail = ""
    try:
        doc = json.loads(exc.read(65536) or b"{}")
        detail = f": {doc['error']}" if isinstance(doc, dict) and doc.get("error") else ""
    except (ValueError, OSError):
        pass
    where = f" to {exc.headers.get('Location')}" if 300 <= exc.code < 400 else ""
    return f"{path}: HTTP {exc.code} {exc.reason}{where}{detail}"[:300]


def _reason(exc: Exception, url: str, elapsed_s: float) -> str:
    inner = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    netloc = urlsplit(url).netloc
    if isinstance(inner, ConnectionRefusedError):
        return f"connection refused ({netloc})"
    if isinstance(inner, TimeoutError | socket.timeout):
        return f"timed out after {elapsed_s:.1f} s ({netloc})"
    if isinstance(inner, ssl.SSLError):
        return f"TLS error: {getattr(inner, 'reason', None) or inner}"
    if isinstance(inner, socket.gaierror):
        return f"cannot resolve {urlsplit(url).hostname!r} ({inner.strerror})"
    if isinstance(inner, OSError) and inner.strerror:
        return f"{inner.strerror} ({netloc})"
    return f"{type(inner).__name__}: {inner}"[:300]


def _result(data: Any, kind: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") != kind:
        raise PromDown(f"expected a {kind} result, got {str(data)[:80]}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromDown(f"expected a {kind} result list")
    return result


def _t(seconds: float) -> str:
    return f"{seconds:.3f}"
