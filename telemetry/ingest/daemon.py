"""The collection loop: any ``Source`` into any ``BatchSink`` on a fixed schedule.

``factoryfloor ingest`` runs it with the scrape source into the store writer (``--store``) or
the forwarder (``--server``); ``factoryfloor serve --scrape-config`` runs it into the server's
ingest service. Every ``interval`` seconds (on a fixed schedule, not interval-after-the-last-
round) it asks the source for the batches due at the clock's time, hands each to the sink, tells
the source what became of it, and logs the sink's line, with the targets that went down (and
why) or came back since the round before. A batch the sink fails to take is logged and the
loop goes on. A round that overruns the interval is reported and the schedule
skips ahead rather than piling rounds up.

The clock is injected (``clock``): wall time for collectors, anything else for tests.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime
from urllib.parse import urlsplit

from telemetry.ingest.seam import (
    Batch,
    BatchSink,
    Health,
    HealthBatch,
    Source,
    Written,
    check_fits,
)

Clock = Callable[[], datetime]
Log = Callable[[str], None]


def utcnow() -> datetime:
    """Wall time as the store keeps it: naive UTC."""
    return datetime.utcnow()


def collect(
    source: Source, sink: BatchSink, now: datetime, log: Log | None = None
) -> list[Written]:
    """One round: every batch ``source`` has at ``now`` into ``sink``, each settled with the
    source, then the source's health rows if it keeps them itself. Without ``log`` a failing
    write raises (a one-shot import stops there); with it the failure is logged as that batch's
    line and the round goes on."""
    out = []
    before = {h.target: h for h in source.health()}
    for batch in source.poll(now):
        try:
            written = sink.write(batch)
        except Exception as exc:  # the loop outlives a bad round; the line says why
            if log is None:
                raise
            written = Written.failed(f"round at {now:%H:%M:%S} not stored: {exc}", exc)
        source.settle(now, batch, written)
        if log is not None:
            after = source.health()
            # A batch not taken marks its targets down for that reason, which the line
            # already gives: the changes are judged against the last batch taken.
            log(written.line + (changes(before, after) if written.ok else ""))
            if written.ok:
                before = {h.target: h for h in after}
        out.append(written)
    if source.health_rows and (health := source.health()):
        try:
            sink.write(HealthBatch(now, health))
        except Exception as exc:
            if log is None:
                raise
            log(f"health of {source.name} at {now:%H:%M:%S} not stored: {exc}")
    return out


IN_FLIGHT = 2  # an import's batches queued to the writer while the source makes the next
# the young generation's size during an import: a log's parse makes few objects that outlive
# their block, yet at Python's 700 the 1 GiB log's import collected 1,100 times (1.1 s of the
# GIL); at 50,000 twice (0.03 s)
IMPORT_GC_YOUNG = 50_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic collector's young generation ``IMPORT_GC_YOUNG`` objects for a one-shot
    import (nothing is left uncollected: it runs less often), then as it was; a process that
    turned automatic collection off (a threshold of 0) keeps it off."""
    old = gc.get_threshold()
    if old[0]:
        gc.set_threshold(max(old[0], IMPORT_GC_YOUNG), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def collect_overlapped(source: Source, sink: BatchSink, now: datetime) -> list[Written]:
    """``collect`` of a one-shot import (a failing write raises), each batch written in a thread
    while the source makes the next: a store append releases the GIL, so on two cores it
    overlaps the parse of the next block (a 1 GiB log: #56). Batches are written and settled in
    order, up to ``IN_FLIGHT`` queued (a block's progress points and its signals both overlap
    the next block's parse); after a failed write none queued behind it is written. For a
    source that never reads the store while making batches and takes a batch's settle after it
    made the next ones (``ClusterSource`` importing)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    failed = threading.Event()

    def write(batch: Batch) -> Written:
        if failed.is_set():  # one queued before it failed: the import stops there
            raise RuntimeError("not written: a write before it failed")
        try:
            return sink.write(batch)
        except BaseException:
            failed.set()
            raise

    out: list[Written] = []
    with fewer_collections(), ThreadPoolExecutor(1, thread_name_prefix="store-write") as pool:
        flight: deque[tuple[Batch, Future[Written]]] = deque()
        for batch in source.poll(now):
            if len(flight) >= IN_FLIGHT:
                done, fut = flight.popleft()
                out.append(fut.result())
                source.settle(now, done, out[-1])
            flight.append((batch, pool.submit(write, batch)))
        while flight:
            done, fut = flight.popleft()
            out.append(fut.result())
            source.settle(now, done, out[-1])
    if source.health_rows and (health := source.health()):
        sink.write(HealthBatch(now, health))
    return out


MAX_NAMED = 5  # targets named per change in a round's line; the rest are counted


def changes(before: dict[str, Health], after: Sequence[Health]) -> str:
    """What changed in the round, for its log line: "; HOST:PORT down: REASON" for every
    target down now that was not before (each one on a first round or ``--once``, so "0/1
    targets up" says why), "; HOST:PORT back up" for one that answers again. Targets still
    down are not repeated every round; beyond ``MAX_NAMED`` of a kind they are counted."""
    down = [h for h in after if not h.up and (h.target not in before or before[h.target].up)]
    back = [h for h in after if h.up and h.target in before and not before[h.target].up]
    parts = [f"{_name(h.target)} down: {_reason(h)}" for h in down[:MAX_NAMED]]
    if len(down) > MAX_NAMED:
        parts.append(f"{len(down) - MAX_NAMED:,} more targets down")
    parts += [f"{_name(h.target)} back up" for h in back[:MAX_NAMED]]
    if len(back) > MAX_NAMED:
        parts.append(f"{len(back) - MAX_NAMED:,} more targets back up")
    return "".join(f"; {p}" for p in parts)


def _name(target: str) -> str:
    """``http://host:9400/metrics`` -> ``host:9400``; any other address or name as it is."""
    parts = urlsplit(target)
    if parts.scheme == "http" and parts.path == "/metrics" and not parts.query:
        return parts.netloc
    return target


def _reason(h: Health) -> str:
    """The target's error without a repeat of the address the line already names."""
    error = h.error or "down"
    netloc = urlsplit(h.target).netloc
    return error.replace(f" ({netloc})", "") if netloc else error


def cadence(sources: Sequence[Source]) -> float:
    """Seconds between the rounds of a group of sources: the shortest any of them asks for
    (``Source.interval_s``, the one owner of a source's cadence); 0 when every one of them is
    read once or pushed."""
    due = [s.interval_s for s in sources if s.interval_s > 0]
    return min(due) if due else 0.0


def run_rounds(
    sources: Source | Sequence[Source],
    sink: BatchSink,
    stop: threading.Event,
    log: Log,
    once: bool = False,
    clock: Clock = utcnow,
) -> int:
    """Collect from ``sources`` (each in turn, every round) on a fixed schedule, every
    ``cadence(sources)`` seconds, until ``stop`` is set (or one round with ``once``, or for
    sources that are read once). Returns the number of rounds run. Before the first round,
    ``FactoryFloorError`` if ``sink`` does not take what a source yields."""
    group = [sources] if not isinstance(sources, Sequence) else list(sources)
    for source in group:
        check_fits(source, sink)
    interval_s = cadence(group)
    once = once or interval_s <= 0
    rounds = 0
    next_at = time.monotonic()
    while not stop.is_set():
        now = clock()
        for source in group:
            collect(source, sink, now, log)
        rounds += 1
        if once:
            break
        next_at += interval_s
        late = time.monotonic() - next_at
        if late > 0:
            skipped = int(late // interval_s) + 1
            log(
                f"WARNING: the round took {interval_s + late:.1f} s, longer than the "
                f"{interval_s:g} s interval; skipping {skipped} round(s)"
            )
            next_at += skipped * interval_s
        if _wait(stop, group, next_at):  # news came first: this round starts the schedule
            next_at = time.monotonic()
    return rounds


URGENT_CHECK_S = 0.5  # how often a source that can tell of news (``urgent()``) is asked


def _wait(stop: threading.Event, group: Sequence[Source], until: float) -> bool:
    """Wait until the monotonic time ``until``, or until a source of ``group`` says it has
    news (``urgent()``: a followed log's new bytes that may begin a failure); True for the
    latter. A source without ``urgent`` keeps its fixed schedule."""
    asks = [ask for s in group if callable(ask := getattr(s, "urgent", None))]
    while (left := until - time.monotonic()) > 0:
        if stop.wait(min(left, URGENT_CHECK_S) if asks else left):
            return False
        if any(ask() for ask in asks):
            return True
    return False
