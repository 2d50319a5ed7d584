"""Query results kept until the store's next write: ``ResultCache``.

A store bumps its version on every write; a result computed at one version stays valid until
the next. The store keeps one for its queries and the app keeps one for the replies of page
callbacks (``app.ui``), so the cache knows nothing of DuckDB or Dash: it maps a key and a
version to whatever ``compute`` returned, bounded by bytes.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pandas as pd


def _copy_error(exc: BaseException) -> BaseException:
    """A copy of a shared failure, of the same type and text, without its traceback.

    ``copy.copy`` keeps what built-in errors hold outside ``__dict__`` (``OSError.errno`` and
    ``filename``, ``UnicodeDecodeError``'s fields), but it re-runs ``__init__`` with ``args``,
    which fails for errors whose constructor takes other arguments (``StoreError(path,
    reason)``); those are built field by field.
    """
    try:
        dup = copy.copy(exc)
        if type(dup) is not type(exc) or str(dup) != str(exc):
            raise TypeError("not a faithful copy")
    except Exception:
        try:
            dup = type(exc).__new__(type(exc))
            dup.__dict__.update(exc.__dict__)
            dup.args = exc.args
        except Exception:  # an exotic type that cannot be built so: a plain one with its text
            return RuntimeError(f"{type(exc).__name__}: {exc}")
    dup.__cause__, dup.__context__ = exc.__cause__, exc.__context__
    dup.__suppress_context__ = exc.__suppress_context__
    return dup.with_traceback(None)


def params_key(params: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    """Query parameters as part of a cache key (lists, as for ``IN`` lists, made hashable)."""
    return tuple(tuple(p) if isinstance(p, list) else p for p in params)


def _size(value: Any) -> int:
    if isinstance(value, pd.DataFrame):
        return _frame_bytes(value) + 1024
    if isinstance(value, list):
        return 64 * len(value) * (len(value[0]) if value and isinstance(value[0], tuple) else 1)
    return 64


def _frame_bytes(df: pd.DataFrame) -> int:
    """What ``df.memory_usage(index=True, deep=False).sum()`` says, from the frame's blocks: the
    same bytes in microseconds, where ``memory_usage`` builds a Series per column (0.5-0.8 ms
    a frame, paid for every result a cold view stores: ~7 ms of the Overview's)."""
    try:
        blocks = df._mgr.blocks  # pandas' internals: the public call is the fallback
        return int(sum(getattr(b.values, "nbytes", 0) for b in blocks) + df.index.nbytes)
    except AttributeError:
        return int(df.memory_usage(index=True, deep=False).sum())


class ResultCache:
    """Query results kept until the store's next write (the version changes), so twenty
    engineers looking at the same view cost one query per data update, not twenty.

    Bounded by bytes (least recently used out first), and results of an older version are
    dropped as soon as one of a newer version is stored (a live store writes every few seconds,
    and a moving time range makes new keys each time); results larger than a tenth of the bound
    are not kept. Concurrent requests for the same uncached result wait for the one
    that computes it ("single flight") instead of all hitting DuckDB.
    """

    def __init__(
        self,
        max_bytes: int = 128 * 2**20,
        sizeof: Callable[[Any], int] | None = None,
        stale: Callable[[Any, int], bool] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self._sizeof = sizeof or _size
        # whether a result kept at a version is of no use any more: by default, any older
        # than the newest version seen; a store whose results depend on some tables only
        # says which (``Store._stale``)
        self._stale = stale
        self._items: OrderedDict[Any, tuple[int, Any, int]] = OrderedDict()
        self._bytes = 0
        self._newest = 0  # the newest store version seen
        self._lock = threading.Lock()
        self._inflight: dict[Any, threading.Event] = {}
        # key -> (version, when, error): a failure is shared with the callers that waited for
        # it, for a few seconds only, so a transient error is retried soon after
        self._failed: dict[Any, tuple[int, float, BaseException]] = {}
        self.hits = self.misses = 0
        self._generation = 0  # bumped by clear(): computations begun before it are not kept

    def get(self, key: Any, version: int, compute: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                item = self._items.get(key)
                if item is not None and item[0] == version:
                    self._items.move_to_end(key)
                    self.hits += 1
                    return item[1]
                failed = self._failed.get(key)
                if failed and failed[0] == version and time.monotonic() - failed[1] < 5:
                    # It just failed for the caller we waited on: no rerun. Each caller gets
                    # a copy; re-raising the one object would grow its traceback per caller.
                    raise _copy_error(failed[2]) from None
                waiting = self._inflight.get(key)
                if waiting is None:
                    done = self._inflight[key] = threading.Event()
                    generation = self._generation
                    self.misses += 1
                    break
            waiting.wait(60)
        try:
            value = compute()
            self._put(key, version, value, generation)
            return value
        except Exception as exc:
            with self._lock:
                if generation != self._generation:
                    raise
                self._failed[key] = (version, time.monotonic(), exc)
                if len(self._failed) > 64:
                    self._failed.pop(next(iter(self._failed)))
            raise
        finally:
            with self._lock:
                if self._inflight.get(key) is done:
                    del self._inflight[key]
            done.set()

    def clear(self) -> None:
        """Forget everything (another store was bound: its versions mean nothing here)."""
        with self._lock:
            self._items.clear()
            self._failed.clear()
            self._bytes = 0
            self._newest = 0
            self._generation += 1
            # A computation under way is of the old store: its result is not stored, and new
            # callers do not wait for it (the key is theirs to compute again).
            self._inflight.clear()

    def _put(self, key: Any, version: int, value: Any, generation: int | None = None) -> None:
        size = self._sizeof(value)
        if size > self.max_bytes // 10:
            return
        with self._lock:
            if generation is not None and generation != self._generation:
                return  # computed before clear(), from what was then bound
            if version > self._newest:  # a write happened: older results are of no use now
                self._newest = version
                old_ = self._stale or (lambda _k, v: v < version)
                for k in [k for k, item in self._items.items() if old_(k, item[0])]:
                    self._bytes -= self._items.pop(k)[2]
            # A result of an older version is still stored: callers that asked at that version
            # are waiting on this computation and must find it, not recompute one by one.
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            self._items[key] = (version, value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                _, (_, _, s) = self._items.popitem(last=False)
                self._bytes -= s
