"""How the in-process benchmarks time a view: median and p95 of repeated calls, each cold by
the dashboard benchmark's rule (issue #16: a new store version, no query result kept;
``Store.forget_results`` before each call, the store and its DuckDB buffers open as a
server's are)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from telemetry.store import Store


def p50_p95(times: list[float]) -> tuple[float, float]:
    """The median and the p95 (the ceil(0.95 n)-th smallest) of ``times``."""
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]


def cold(store: Store, fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, p95) ms of ``fn`` on the open ``store``, its results forgotten each time."""
    fn()  # the store's first statements (its tables, its meta) as a server has run them
    times = []
    for _ in range(repeat):
        store.forget_results()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return p50_p95(times)
