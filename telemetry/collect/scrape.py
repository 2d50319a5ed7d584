"""Scraping dcgm-exporter targets: target lists (CLI or Prometheus ``file_sd``) and one round.

A round fetches every target concurrently with a per-target timeout and a body size limit;
a dead, slow, failing or truncated target yields a ``Fetch`` with ``error`` set and never
delays the others beyond the timeout.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.client import HTTPException, IncompleteRead
from urllib.parse import urlsplit

_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^[0-9A-Fa-f:.]+$")
MAX_BODY_BYTES = 16 * 1024 * 1024  # one node's page is ~60 KB; larger bodies are refused
USER_AGENT = "factoryfloor-ingest/0.1"


@dataclass(frozen=True)
class Target:
    url: str  # http://host:9400/metrics
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def host(self) -> str:
        """The target's host name, used when a scrape carries no ``Hostname`` label."""
        netloc = self.url.split("://", 1)[-1].split("/", 1)[0]
        return netloc.rsplit(":", 1)[0] if ":" in netloc else netloc


@dataclass(frozen=True)
class Fetch:
    target: Target
    text: str | None  # the body, None on error
    error: str | None  # why the target is down, in words
    duration_s: float
    status: int | None = None


def normalise(address: str) -> str:
    """``host:9400`` -> ``http://host:9400/metrics``; a full URL is kept. Raises ValueError for
    anything that is not an http(s) address."""
    a = address.strip()
    if not a or any(c.isspace() for c in a) or len(a) > 2048:
        raise ValueError(f"not a scrape target: {address[:80]!r}")
    if "://" not in a:
        a = f"http://{a}"
    scheme = a.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) target: {address[:80]!r}")
    rest = a.split("://", 1)[1]
    if "/" not in rest:
        a += "/metrics"
    parts = urlsplit(a)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise ValueError(f"bad port in target {address[:80]!r}") from None
    if not parts.hostname or not _HOST.match(parts.hostname):
        raise ValueError(f"bad host in target {address[:80]!r}")
    return a


def load_targets(path: str) -> list[Target]:
    """Targets from a Prometheus ``file_sd`` file (JSON, or YAML when it is not JSON):
    ``[{"targets": ["host:9400", ...], "labels": {...}}]``. Raises ValueError naming the
    problem for a file that does not have that shape."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        groups = json.loads(text)
    except json.JSONDecodeError:
        import yaml  # a declared dependency: file_sd files are often YAML

        try:
            groups = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: neither JSON nor YAML ({exc})") from None
    if not isinstance(groups, list):
        raise ValueError(f"{path}: expected a list of target groups")
    out: list[Target] = []
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list):
            raise ValueError(f"{path}: group {i} has no 'targets' list")
        labels = g.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError(f"{path}: group {i} 'labels' is not a mapping")
        for t in g["targets"]:
            out.append(Target(normalise(str(t)), {str(k): str(v) for k, v in labels.items()}))
    return out


class TargetsFile:
    """A ``file_sd`` file re-read when its modification time changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mtime = -1.0
        self._targets: list[Target] = []

    @property
    def last_good(self) -> list[Target]:
        """The targets of the last successful read (empty before the first)."""
        return self._targets

    def targets(self) -> list[Target]:
        mtime = os.stat(self.path).st_mtime
        if mtime != self._mtime:
            self._targets = load_targets(self.path)
            self._mtime = mtime
        return self._targets


def fetch(target: Target, timeout_s: float, max_bytes: int = MAX_BODY_BYTES) -> Fetch:
    """GET one target. Never raises: every failure becomes ``Fetch.error``."""
    t0 = time.perf_counter()
    req = urllib.request.Request(target.url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read(max_bytes + 1)
            status = resp.status
            declared = resp.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) != len(body) <= max_bytes:
            return Fetch(
                target,
                None,
                f"truncated body ({len(body)} of {declared} bytes)",
                time.perf_counter() - t0,
                status,
            )
        if len(body) > max_bytes:
            return Fetch(
                target,
                None,
                f"body larger than {max_bytes:,} bytes",
                time.perf_counter() - t0,
                status,
            )
        return Fetch(
            target, body.decode("utf-8", errors="replace"), None, time.perf_counter() - t0, status
        )
    except urllib.error.HTTPError as exc:
        return Fetch(
            target, None, f"HTTP {exc.code} {exc.reason}", time.perf_counter() - t0, exc.code
        )
    except IncompleteRead as exc:
        return Fetch(
            target, None, f"truncated body ({len(exc.partial)} bytes)", time.perf_counter() - t0
        )
    except (TimeoutError, urllib.error.URLError, HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Fetch(
            target, None, f"{type(exc).__name__}: {reason}"[:300], time.perf_counter() - t0
        )


def scrape_round(targets: list[Target], timeout_s: float = 5.0, workers: int = 64) -> list[Fetch]:
    """Fetch every target concurrently; results in target order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(targets))) as pool:
        return list(pool.map(lambda t: fetch(t, timeout_s), targets))
