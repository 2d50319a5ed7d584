"""What several commands share: the log line, one-line errors, binding checks, a scenario."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.settings import Settings
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import utcnow
from telemetry.replay.scenarios import Scenario, get_scenario

if TYPE_CHECKING:
    from telemetry.ingest.http_api import IngestService
    from telemetry.ingest.writer import StoreWriter


def log(line: str) -> None:
    """A daemon's log line on stderr, stamped with the time of day (UTC)."""
    print(f"{utcnow():%H:%M:%S} {line}", file=sys.stderr, flush=True)


def retention_keeper(store: Any, keep_s: float | None, stop: threading.Event) -> Any:
    """``--raw-retention``: the thread that expires old raw samples (None when not asked)."""
    if keep_s is None:
        return None
    from datetime import timedelta

    from telemetry.store.retention import RetentionKeeper

    days, hours = keep_s / 86400, keep_s / 3600
    kept = f"{days:g} days" if days >= 2 and days == int(days) else f"{hours:.4g} h"
    if keep_s == 0:
        kept = "until their rollups close"
    log(f"raw retention: per-GPU samples kept {kept}, rollups for ever")
    return RetentionKeeper(store, timedelta(seconds=keep_s), log).start(stop)


def expire_now(store: Any, keep_s: float) -> None:
    """One retention pass as a command ends (the keeper looks only every minute), logged."""
    from datetime import timedelta

    from telemetry.store.retention import expire

    try:
        done = expire(store, timedelta(seconds=keep_s))
    except Exception as exc:  # a full disk: the next run's keeper tries again
        log(f"raw retention: pass failed: {exc}")
        return
    if done.total and done.horizon is not None:
        log(
            f"raw retention: {done.total:,} raw rows before {done.horizon:%Y-%m-%d %H:%M} UTC "
            "left the store; rollups kept"
        )


@contextlib.contextmanager
def stopping_gently(stop: threading.Event, what: str) -> Iterator[None]:
    """SIGTERM (systemd's stop, ``kill``) and a first Ctrl-C set ``stop``, so the command ends
    after ``what`` is stored, not in the middle of it: an interrupted write is rolled back
    (a daemon's scrape cannot be taken again; a replay's rollups would be left behind). A
    second Ctrl-C stops at once."""

    def ask(signum: int, _frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()
        name = signal.Signals(signum).name
        log(f"{name}: stopping after {what} (Ctrl-C again to stop at once)")

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only (an in-process caller's thread)
        return
    before = {sig: signal.signal(sig, ask) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def err(msg: str, code: int = 1) -> int:
    print(f"factoryfloor: error: {msg}", file=sys.stderr)
    return code


def scenario_from(s: Settings) -> Scenario:
    """``s.scenario`` with the overrides the settings give."""
    assert s.scenario is not None  # the parser requires one
    sc = get_scenario(s.scenario)
    for name, val in (("pfs_every", s.pfs_every), ("object_every", s.object_every)):
        if val is not None and val < 1:
            raise FactoryFloorError(f"--{name.replace('_', '-')} must be >= 1")
    if s.nodes is not None and s.nodes * sc.gpus_per_node < sc.stragglers + sc.throttled:
        raise FactoryFloorError(
            f"--nodes {s.nodes} is too few for {sc.name}: it simulates {sc.stragglers} slow and "
            f"{sc.throttled} hot GPUs among the job's; give at least "
            f"{-(-(sc.stragglers + sc.throttled) // sc.gpus_per_node)} nodes"
        )
    if s.nodes is not None:  # the lemon nodes that exist in the smaller fleet
        sc = sc.with_overrides(
            nodes=s.nodes, lemon_nodes=tuple(n for n in sc.lemon_nodes if n < s.nodes)
        )
    return sc.with_overrides(
        days=s.days,
        start=s.start,
        nvme_interval_s=s.nvme_interval_s,
        pfs_every=s.pfs_every,
        object_every=s.object_every,
    )


def is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def check_bind(host: str, allow_remote: bool) -> None:
    try:
        loopback = is_loopback(host)
    except ValueError:
        raise FactoryFloorError(f"--host {host!r} is not an IP address") from None
    if not loopback and not allow_remote:
        raise FactoryFloorError(
            f"refusing to listen on {host}: the dashboard binds to 127.0.0.1 unless you pass "
            "--allow-remote"
        )


def check_port_free(host: str, port: int) -> None:
    """Fail before any store is opened (or, for ``demo``, reset) when the port is taken.
    Werkzeug would otherwise print its own two lines and exit after the store was touched."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            hint = " (another server is on that port; pass --port)"
            raise FactoryFloorError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                + (hint if exc.errno == errno.EADDRINUSE else "")
            ) from None


def finish_rollups(sink: StoreWriter | IngestService) -> None:
    """The rollup levels a round builds only every 5 minutes, brought up to the last round
    before the store closes; a failure (a full disk) leaves them to the next refresh."""
    try:
        sink.finish()
    except Exception as exc:
        log(f"rollups: the last rounds reach the hourly levels at the next refresh: {exc}")
