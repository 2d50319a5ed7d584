"""``factoryfloor serve``: the dashboard over a store this process owns, plus what writes into
it from here: a live replay (``--replay``), the ingest API (``--accept-ingest``) and the
registered sources asked for (``--scrape-config``...), each source on a thread of its own
running the collection loop into the server's ingest service."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.commands.common import (
    check_bind,
    check_port_free,
    finish_rollups,
    is_loopback,
    log,
    retention_keeper,
)
from app.settings import LIVE_SPEED, Settings
from telemetry import actions, sources
from telemetry.alerting import AlertConfig, load_config
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import run_rounds, utcnow
from telemetry.ingest.seam import BatchSink, Source, SourceContext
from telemetry.replay.scenarios import Scenario, get_scenario

if TYPE_CHECKING:
    from telemetry.store import Store


def run(s: Settings) -> int:
    check_bind(s.host, s.allow_remote)
    check_port_free(s.host, s.port)
    assert s.store is not None  # the parser requires it
    collecting = bool(sources.asked("serve", s.sources))
    if not (s.scenario or s.accept_ingest or collecting) and not os.path.exists(s.store):
        raise FactoryFloorError(
            f"store {s.store} does not exist; create it with `factoryfloor replay` "
            "or pass --replay SCENARIO"
        )
    token = s.token()
    s.operator_token()  # an unreadable or too short operator token stops here, before binding
    if s.alerts_file:
        load_config(s.alerts_file)  # likewise a wrong alerts file
    actions.configure(s.actions_file)  # and a wrong actions file; every page reads this table
    s.prices()  # and a malformed --run-price
    if s.accept_ingest and token is None and not is_loopback(s.host):
        raise FactoryFloorError(
            f"refusing to accept ingest on {s.host} without a token: anyone who can reach "
            "the port could write into the store. Pass --token-file (or set FACTORYFLOOR_TOKEN)."
        )
    stop = threading.Event()
    ctx = SourceContext("serve", s.interval_s, s.timeout_s, log, stop=stop)
    collected = sources.build("serve", s.sources, ctx)
    sc = get_scenario(s.scenario) if s.scenario else None
    return serve_dashboard(s, sc, collected, token, stop)


def serve_dashboard(
    s: Settings,
    replay_sc: Scenario | None = None,
    collected: list[Source] | None = None,
    token: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Serve ``s.store`` on ``s.host:s.port`` until interrupted; with ``replay_sc`` replayed
    live into it, the ``collected`` sources run into it, and the ingest API if asked. ``stop``
    (the one the sources were built with) is set when the server stops."""
    from app import guard
    from app.data.services import Services
    from app.main import create_app, run_server, warm_landing
    from app.memory import freeze_startup, keep_rss_flat
    from telemetry.ingest.http_api import IngestService, make_blueprint
    from telemetry.label_api import make_label_blueprint
    from telemetry.store import open_store

    assert s.store is not None
    collected = collected or []
    # Without a writer in this process the store is opened read-only, so other read-only
    # processes (a second dashboard, `summary`) can share it; DuckDB forbids that next to a writer.
    # Alert delivery writes: each alert's history (``telemetry.alert_history``) outlives serve.
    operator = s.operator_token()
    writes = (replay_sc is not None or s.accept_ingest or bool(collected)
              or operator is not None or bool(s.alerts_file))  # fmt: skip
    if s.raw_retention is not None and not writes:
        raise FactoryFloorError(
            "--raw-retention needs a store this server writes (--accept-ingest, --replay or a "
            "source); a read-only dashboard leaves the store as it is"
        )
    store = open_store(s.store, read_only=not writes)
    service = (
        IngestService(store, into_replay=s.ingest_into_replay, rw_policy=_rw_policy(s))
        if writes
        else None
    )
    if service is not None and s.accept_ingest:
        _resume_remote_write(service)
    stop = stop or threading.Event()
    keep_rss_flat(stop)  # before any worker or request thread allocates
    workers = []
    if replay_sc is not None:
        workers.append(_replay_thread(store, replay_sc, s, stop))
    for source in collected:
        assert service is not None
        workers.append(_collect_thread(source, service, stop))
    alerts = _alert_loop(store, s, stop) if s.alerts_file else None
    app = create_app(
        Services(store, s.prices(), alerts, _history(collected), operator_token=operator or None)
    )
    guard.install(app.server, token, guard.allowed_hosts(s.host, s.allowed_hosts or ()))
    app.server.register_blueprint(make_blueprint(service, token, accept=s.accept_ingest))
    app.server.register_blueprint(make_label_blueprint(store, operator))
    if token is None and not is_loopback(s.host):
        log(
            f"WARNING: listening on {s.host} without a token: anyone who can reach port "
            f"{s.port} sees the dashboard (and may post to the ingest API). Pass --token-file."
        )
    freeze_startup()  # what is built by now lives as long as the server
    for w in workers:
        w.start()
    keeper = retention_keeper(store, s.raw_retention, stop)
    if keeper is not None:
        workers.append(keeper)
    if alerts is not None:
        alerts.start()
        workers.append(alerts)
    print(
        f"Factory Floor dashboard on http://{s.host}:{s.port}/ (store {s.store})", file=sys.stderr
    )
    signal.signal(signal.SIGTERM, _interrupt)  # systemd's stop: shut down as on Ctrl-C
    workers.append(warm_landing())  # joined below: the store is not closed under its query
    try:
        run_server(app, s.host, s.port)
    except OSError as exc:
        raise FactoryFloorError(
            f"cannot listen on {s.host}:{s.port}: {exc.strerror or exc}"
        ) from None
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
        if service is not None:
            _flush_remote_write(service)
            finish_rollups(service)
        store.close()
    return 0


def _alert_loop(store: Any, s: Settings, stop: threading.Event) -> threading.Thread:
    """The loop (not started) that evaluates and delivers the store's alerts
    (``telemetry.notify``); the Overview shows how delivery goes (``Services.alerts``)."""
    from telemetry.notify import AlertLoop, Dispatcher

    assert s.alerts_file is not None
    config = load_config(s.alerts_file)
    if config.external_url == AlertConfig.external_url:  # not set: this server's own address
        host = socket.gethostname() if s.host in ("0.0.0.0", "::", "") else s.host
        host = f"[{host}]" if ":" in host else host
        config = replace(config, external_url=f"http://{host}:{s.port}")
    loop = AlertLoop(store, Dispatcher(config, stop), stop)
    names = ", ".join(f"{r.name} ({r.kind})" for r in config.receivers)
    log(f"alerts: evaluated every {config.evaluate_every_s:g} s, delivered to {names}")
    return loop


def _history(collected: list[Source]) -> Any:
    """With a --prometheus source, where expired per-GPU series are read back (its servers)."""
    from telemetry.collect.prometheus.prom_history import PromHistory

    clients = [srv.client for src in collected if src.name == "prometheus" for srv in src.servers]  # type: ignore[attr-defined]
    return PromHistory(clients) if clients else None


def _rw_policy(s: Settings) -> Any:
    from telemetry.ingest.remote_write import Policy

    return Policy(
        window_s=s.rw_interval_s, max_age_s=s.rw_max_age_s, max_future_s=s.rw_max_future_s
    )


def _resume_remote_write(service: Any) -> None:
    """What a killed server left staged reaches the store now, not at the next request."""
    from telemetry.ingest.rw_receiver import resume

    n = resume(service)
    if n:
        log(f"remote_write: {n} round(s) staged before the last stop written")


def _interrupt(_sig: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _flush_remote_write(service: object) -> None:
    """remote_write windows still staged are written before the store closes."""
    from telemetry.ingest.rw_receiver import flush

    try:
        n = flush(service)
    except Exception as exc:  # a full disk: they stay staged, written after the next start
        log(f"remote_write: staged windows left for the next start: {exc}")
        return
    if n:
        log(f"remote_write: {n} staged window(s) written at shutdown")


def _replay_thread(
    store: Store, replay_sc: Scenario, s: Settings, stop: threading.Event
) -> threading.Thread:
    from telemetry.replay.runner import replay

    speed = s.speed or LIVE_SPEED
    start = (utcnow() - timedelta(hours=s.prefill_hours)).replace(second=0, microsecond=0)
    sc = replay_sc.with_overrides(start=start)
    print(
        f"replaying {sc.name} (seed {s.seed}): {s.prefill_hours:g} simulated hours backfilled, "
        f"then live at {speed:g}x",
        file=sys.stderr,
    )

    def run() -> None:
        try:
            replay(store, sc, s.seed, speed=speed, prefill_s=s.prefill_hours * 3600.0, stop=stop)
        except Exception as exc:  # the server keeps serving what is stored
            print(f"factoryfloor: replay stopped: {exc}", file=sys.stderr)

    return threading.Thread(target=run, name="replay", daemon=True)


def _collect_thread(source: Source, sink: BatchSink, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        try:
            run_rounds(source, sink, stop, log)
        except Exception as exc:  # the server keeps serving what is stored
            log(f"factoryfloor: {source.name} loop stopped: {exc}")

    return threading.Thread(target=run, name=source.name, daemon=True)
