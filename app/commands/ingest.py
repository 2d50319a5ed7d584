"""``factoryfloor ingest``: the collection daemon. The registered sources asked for (``--target``
and ``--targets-file`` for the scrape source...) run on one schedule into the store writer
(``--store``, headless) or the forwarder (``--server``, spooling on disk until the server that
owns the store has taken each round)."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from app.commands.common import (
    expire_now,
    finish_rollups,
    log,
    retention_keeper,
    stopping_gently,
)
from app.settings import Settings
from telemetry import sources
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import run_rounds
from telemetry.ingest.seam import Source, SourceContext

FORWARD_TIMEOUT_S = 60.0  # at least: a busy server is slow, not gone (no early resend)
EXIT_NOT_TAKEN = 3  # --once --server: the server did not take the round; it stays spooled
EXIT_REFUSED = 4  # --once --server: the server refused the round for good (spool/rejected)


def run(s: Settings) -> int:
    if not sources.asked("ingest", s.sources):
        raise FactoryFloorError(f"give at least one {sources.asking('ingest')}")
    if s.timeout_s >= s.interval_s and not s.once:
        raise FactoryFloorError("--timeout must be shorter than --interval")
    stop = threading.Event()
    ctx = SourceContext("ingest", s.interval_s, s.timeout_s, log, stop=stop)
    built = sources.build("ingest", s.sources, ctx)
    with stopping_gently(stop, "the round in progress"):
        return _run(s, built, stop)


def _run(s: Settings, built: list[Source], stop: threading.Event) -> int:
    if s.server:
        if s.raw_retention is not None:
            raise FactoryFloorError(
                "--raw-retention applies to a store this process writes (--store); the server "
                "at --server keeps its own (serve --raw-retention)"
            )
        return _forward(s, built, stop)
    from telemetry.ingest.writer import StoreWriter
    from telemetry.store import open_store

    assert s.store is not None  # --store or --server, the parser requires one
    with open_store(s.store) as store:
        try:
            sink = StoreWriter(store, rounds=True)
        except ValueError as exc:
            raise FactoryFloorError(str(exc)) from None
        keeper = retention_keeper(store, s.raw_retention, stop)
        try:
            run_rounds(built, sink, stop, log, once=s.once)
        finally:
            stop.set()
            if keeper is not None:
                keeper.join(timeout=30)
            finish_rollups(sink)
            if s.raw_retention is not None:  # what the last rounds' rollups closed leaves now
                expire_now(store, s.raw_retention)
    # --once from cron: did every source get something through?
    return 0 if not s.once or all(any(h.up for h in src.health()) for src in built) else 1


def _forward(s: Settings, built: list[Source], stop: threading.Event) -> int:
    from telemetry.ingest.forward import Forwarder
    from telemetry.ingest.spool import Spool

    assert s.server is not None
    parts = urlsplit(s.server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FactoryFloorError(f"--server {s.server!r} is not an http(s) URL")
    spool = Spool(s.spool, int(s.spool_max_mb * 2**20))
    timeout = max(FORWARD_TIMEOUT_S, 4 * s.interval_s)
    fwd = Forwarder(s.server, spool, s.token(), timeout_s=timeout, log=log)
    backlog = len(spool.pending())
    if backlog:
        log(f"{backlog} spooled rounds from an earlier run in {spool.dir}; delivering them first")
    try:
        if s.once:
            run_rounds(built, fwd, stop, log, once=True)
            if fwd.drain():
                if fwd.rejected:
                    log(f"the server refused the round; it is kept in {spool.rejected_dir}")
                    return EXIT_REFUSED
                log(f"delivered to {s.server}")
                return 0
            log(
                f"server {s.server} did not take the round ({fwd.last_error}); "
                f"{len(spool.pending())} rounds stay in {spool.dir} for the next run"
            )
            return EXIT_NOT_TAKEN
        fwd.start()
        run_rounds(built, fwd, stop, log)
        return 0
    finally:
        fwd.stop()
        spool.close()
