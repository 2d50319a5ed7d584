"""``factoryfloor replay``: a simulated cluster into a store (backfilled, or live at a speed),
or served as live dcgm-exporter endpoints (``--serve-exporters``), optionally both at once."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from app.commands.common import err, log, retention_keeper, scenario_from, stopping_gently
from app.settings import EXPORTER_BASE_PORT, LIVE_SPEED, Settings
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import utcnow
from telemetry.replay.scenarios import Scenario

if TYPE_CHECKING:
    from telemetry.replay.exporters import ExporterFarm

Progress = Callable[[float, float, int], None]


def _progress_bar(total: float, enabled: bool) -> tuple[Any, Progress | None]:
    """A tqdm bar in simulated hours and the replay's progress callback that moves it."""
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=round(total / 3600.0, 2), unit="sim-h", dynamic_ncols=True, file=sys.stderr)

    def update(done: float, _total: float, rows: int) -> None:
        bar.n = round(done / 3600.0, 2)
        bar.set_postfix_str(f"{rows:,} samples", refresh=False)
        bar.refresh()

    return bar, update


def run(s: Settings) -> int:
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    if s.serve_exporters:
        if s.raw_retention is not None:
            return err("--raw-retention applies to --store, not to --serve-exporters", 2)
        return _replay_exporters(s)
    if s.store is None:
        return err("the following arguments are required: --store", 2)
    if s.exporter_base_port is not None or s.exporter_targets_file is not None:
        return err("--exporter-base-port and --targets-file need --serve-exporters", 2)
    sc = scenario_from(s)
    if s.speed is not None and s.start is None:
        sc = sc.with_overrides(start=utcnow().replace(second=0, microsecond=0))
    with open_store(s.store) as store:
        bar, update = _progress_bar(sc.duration_s, not s.no_progress and sys.stderr.isatty())
        stop = threading.Event()
        keeper = retention_keeper(store, s.raw_retention, stop)
        try:
            with stopping_gently(stop, "the window in progress and the rollups"):
                if s.speed is not None:
                    log(
                        f"replaying {sc.name} (seed {s.seed}) live at {s.speed:g}x into "
                        f"{s.store}; Ctrl-C or SIGTERM stops it"
                    )
                res = replay(
                    store,
                    sc,
                    s.seed,
                    interval_s=s.sample_interval_s,
                    speed=s.speed,
                    progress=update,
                    stop=stop,
                )
        except ValueError as exc:
            raise FactoryFloorError(str(exc)) from None
        finally:
            stop.set()
            if keeper is not None:
                keeper.join()
            if bar is not None:
                bar.close()
        if s.raw_retention is not None:  # what the run's end left past the horizon
            from telemetry.store.retention import expire

            done = expire(store, timedelta(seconds=s.raw_retention))
            if done.total and done.horizon is not None:
                print(
                    f"raw retention: {done.total:,} raw rows before "
                    f"{done.horizon:%Y-%m-%d %H:%M} UTC left the store; rollups kept",
                    file=sys.stderr,
                )
    verb = "stopped" if res.stopped else "replayed"
    until = sc.start + timedelta(seconds=res.sim_seconds)
    print(
        f"{verb} {res.run_id}: {res.sample_rows:,} GPU samples, "
        f"{res.sim_seconds / 3600:.1f} simulated hours in {res.wall_seconds:.1f} s "
        f"({res.rows_per_s:,.0f} rows/s) into {s.store}; simulated time "
        f"{sc.start:%Y-%m-%d %H:%M} - {until:%Y-%m-%d %H:%M} UTC"
    )
    return 0


def _replay_exporters(s: Settings) -> int:
    """`replay --serve-exporters`: the simulated nodes as live dcgm-exporter endpoints, and the
    same replay into --store (paced alike, on a thread) when one is given."""
    from telemetry.replay.exporter_sim import ExporterSimulation, exporter_interval
    from telemetry.replay.exporters import ExporterFarm, serve_exporters

    if s.backfill:
        return err("--serve-exporters streams live; it cannot --backfill", 2)
    sc = scenario_from(s)
    if s.start is None:
        sc = sc.with_overrides(start=utcnow().replace(second=0, microsecond=0))
    base = EXPORTER_BASE_PORT if s.exporter_base_port is None else s.exporter_base_port
    nodes = sc.nodes + sc.spare_nodes
    if base and base + nodes - 1 > 65535:
        return err(
            f"--exporter-base-port {base}: {nodes} nodes need ports up to "
            f"{base + nodes - 1} (max 65535)",
            2,
        )
    speed, interval = s.speed or LIVE_SPEED, s.sample_interval_s or exporter_interval(sc)
    farm = ExporterFarm(ExporterSimulation(sc, s.seed, interval), base)
    stop = threading.Event()
    workers: list[threading.Thread] = []
    errors: list[BaseException] = []

    def ready(f: ExporterFarm) -> None:  # every node listens: start the store's replay too
        if s.store is not None:
            workers.append(_store_replay_thread(s.store, sc, s.seed, interval, speed, stop, errors))
        where = f", targets in {s.exporter_targets_file}" if s.exporter_targets_file else ""
        print(
            f"serving {len(f.ports)} dcgm-exporter endpoints on 127.0.0.1:{f.ports[0]}.."
            f"{f.ports[-1]} ({sc.name}, seed {s.seed}, live at {speed:g}x, one sample "
            f"every {interval:g} simulated s){where}",
            file=sys.stderr,
            flush=True,
        )

    try:
        serve_exporters(farm, speed, s.exporter_targets_file, ready)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    print(f"served {farm.requests:,} requests; simulated {farm.sim.t / 3600:.2f} h")
    return 1 if errors else 0


def _store_replay_thread(
    path: str,
    sc: Scenario,
    seed: int,
    interval: float,
    speed: float,
    stop: threading.Event,
    errors: list[BaseException],
) -> threading.Thread:
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    store = open_store(path)  # on the caller's thread: a locked store ends the command at once

    def run() -> None:
        try:
            replay(store, sc, seed, interval_s=interval, speed=speed, stop=stop)
        except Exception as exc:  # the exporters keep serving; the exit status says it failed
            errors.append(exc)
            print(f"factoryfloor: error: replay into {path} stopped: {exc}", file=sys.stderr)
        finally:
            store.close()

    worker = threading.Thread(target=run, name="replay-store", daemon=True)
    worker.start()
    return worker
