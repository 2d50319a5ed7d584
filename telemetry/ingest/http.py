"""What the server's HTTP endpoints share (the ingest API, the label API, the app's guard):
errors as short JSON (``ApiError``, ``_json``), what a request may cost (``Limits``,
``WriteGate``) and a log that a burst of bad requests cannot flood (``LogThrottle``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from flask import Response

from telemetry.ingest.wire import MAX_DECODED_BYTES

# A 2,048-node round of default counters is ~15 MB gzip'd and ~130 MB decoded. The limits leave
# room for that (4x, 2x) while bounding what one request can cost: each of the two decoding
# slots holds at most a body and its decoded text (plus what JSON parsing builds from it).
MAX_ROUND_BODY = 64 * 1024 * 1024
MAX_ROUND_DECODED = MAX_DECODED_BYTES  # the wire format's own bound
MAX_JSON_BODY = 16 * 1024 * 1024


class LogThrottle:
    """At most ``burst`` lines per kind of event every ``window_s`` seconds, then one line
    saying how many like it were left out: a burst of bad requests (or one bug hit by every
    request) costs the log a few lines, not one per request. An exception is told in the same
    one line, with where it was raised (file:line) and its message, never a traceback."""

    def __init__(self, logger: logging.Logger, burst: int = 5, window_s: float = 60.0) -> None:
        self.logger, self.burst, self.window_s = logger, burst, window_s
        self._mutex = threading.Lock()
        self._windows: dict[str, tuple[float, int]] = {}  # kind -> (window start, events)

    def __call__(
        self, level: int, kind: str, message: str, exc: BaseException | None = None
    ) -> bool:
        """Log ``message`` unless ``kind`` is over its budget; whether it was logged."""
        if not self.allow(kind, level):
            return False
        if exc is not None:
            message += f" {where(exc)}"
        self.logger.log(level, "%s", message.replace("\n", " "))
        return True

    def allow(self, kind: str, level: int = logging.WARNING) -> bool:
        """Count one event of ``kind``; whether it is within the budget (a new window first
        logs how many of the last one were left out)."""
        now = time.monotonic()
        left_out = None
        with self._mutex:
            start, n = self._windows.get(kind, (now, 0))
            if now - start >= self.window_s:
                if n > self.burst:
                    left_out = (n - self.burst, kind[:120], now - start)
                start, n = now, 0
            self._windows[kind] = (start, n + 1)
            if len(self._windows) > 1024:  # kinds are few (exception types), but bounded
                self._windows.pop(next(iter(self._windows)))
        if left_out is not None:
            # Logged outside the lock: a filter on this logger (``app.guard.OneLine``) passes
            # the line through ``allow`` again, which would wait on the lock for ever.
            self.logger.log(level, "%d more like %r in %.0f s not logged", *left_out)
        return n < self.burst


def where(exc: BaseException) -> str:
    """``at file:line (message)`` of the innermost frame that raised ``exc``: enough to find a
    bug from one log line."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"at {frames[-1].filename}:{frames[-1].lineno} " if frames else ""
    return f"{at}({str(exc)[:200]})"


@dataclass(frozen=True)
class Limits:
    """What one write request may cost. ``max_writes`` caps the write requests in flight at
    once (each may hold its body in memory while it waits for the store's one writer): one
    more is answered 429 with Retry-After at once rather than queued. Tests lower them."""

    round_body: int = MAX_ROUND_BODY
    round_decoded: int = MAX_ROUND_DECODED
    json_body: int = MAX_JSON_BODY
    max_writes: int = 8
    retry_after_s: int = 1


class WriteGate:
    """The in-flight write cap (``Limits.max_writes``): ``with gate.slot():`` or 429."""

    def __init__(self, limit: int, retry_after_s: int = 1) -> None:
        self.limit, self.retry_after_s = limit, retry_after_s
        self._slots = threading.BoundedSemaphore(limit)
        self.refused = 0

    def acquire(self) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            raise ApiError(
                429,
                f"{self.limit} writes already in flight; retry in {self.retry_after_s} s",
                retry_after_s=self.retry_after_s,
            )

    def release(self) -> None:
        self._slots.release()


class ApiError(Exception):
    def __init__(
        self, status: int, reason: str, retry_after_s: int | None = None, **extra: Any
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.extra = extra


def _json(status: int, body: dict[str, Any], retry_after_s: int | None = None) -> Response:
    resp = Response(json.dumps(body, default=str), status=status, mimetype="application/json")
    if retry_after_s is not None:
        resp.headers["Retry-After"] = str(retry_after_s)
    return resp
