"""Drives a scenario into a store: backfill as fast as possible, or live at a paced speed.

Backfill and live differ only in how the loop steps (SimPy's lesson): backfill takes big windows
back to back and overlaps synthesis with the store's inserts on a writer thread; live takes one
sample interval per window and sleeps until the wall clock catches up with ``speed``. Both poll
the replay as a source (``replay.source.ReplaySource``, clocked by simulated time) and write
its windows through a ``BatchSink`` (the store writer unless another is given).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from telemetry.ingest.daemon import collect
from telemetry.ingest.seam import BatchSink, Settle, Tables, check_fits
from telemetry.ingest.writer import StoreWriter
from telemetry.reference import GPU_MODELS
from telemetry.replay.scenarios import Scenario
from telemetry.replay.source import ReplaySource
from telemetry.replay.synth import JOB_ROLE, Synthesizer
from telemetry.replay.timeline import checkpoint_bytes, simulate
from telemetry.store import Store
from telemetry.store.rollups import gpu_levels_for

ROLLUP_EVERY_S = 5.0  # during a backfill, rollups (what the dashboard reads) lag by at most this
# Samples in a backfill window. At 2 M a llama3-405b window holds 12 hours, so its hourly
# per-GPU rows (198 K) fill a DuckDB row group and go straight to the file; at 1 M (99 K
# rows) they went through the WAL and a checkpoint at nearly every commit (4-day backfill:
# commits 2.3 -> 0.4-0.8 s, rows/s +17-20 %, peak RSS 1.6 -> 2.1 GB).
WINDOW_SAMPLES = 2_000_000

Progress = Callable[[float, float, int], None]  # (sim seconds done, sim seconds total, rows)


@dataclass(frozen=True)
class ReplayResult:
    run_id: str
    sample_rows: int
    sim_seconds: float  # replayed: the run's end, or where ``stop`` ended it
    wall_seconds: float
    stopped: bool = False  # ``stop`` was set before the run's end

    @property
    def rows_per_s(self) -> float:
        return self.sample_rows / max(self.wall_seconds, 1e-9)


def run_id_for(sc: Scenario, seed: int) -> str:
    return f"{sc.name}-s{seed}"


def _register(store: Store, sc: Scenario, seed: int, syn: Synthesizer, interval_s: float) -> None:
    run_id = syn.run_id
    if store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]):
        raise ValueError(f"run {run_id} is already in store {store.path}; use a fresh store")
    store.set_meta(
        {
            "source": "replay",
            "simulated": "true",
            "scenario": sc.name,
            "seed": str(seed),
            "sample_interval_s": str(interval_s),
            "scenario_start": sc.start.isoformat(),
            "scenario_description": sc.description,
        }
    )
    peak = GPU_MODELS[sc.gpu].bf16_tflops * 1e12
    policy = sc.checkpoint.as_dict() | {"bytes": checkpoint_bytes(sc.params)}
    import pandas as pd

    run = pd.DataFrame(
        [
            {
                "run_id": run_id,
                "name": f"{sc.name} (seed {seed})",
                "model_params": sc.params,
                "gpu_model": GPU_MODELS[sc.gpu].name,
                "gpus": sc.gpus,
                "nodes": sc.nodes,
                "start_ts": pd.Timestamp(sc.start),
                "end_ts": pd.Timestamp(sc.start) + pd.Timedelta(seconds=sc.duration_s),
                "tokens_per_step": sc.tokens_per_step,
                "peak_flops_per_gpu": peak,
                "ckpt_policy": json.dumps(policy),
                "source": "replay",
                "scenario": sc.name,
                "seed": seed,
                "simulated": True,
            }
        ]
    )
    gpus = syn.gpus_frame()
    known = store.rows("SELECT host, gpu FROM gpus ORDER BY gpu_id")
    if not known:
        store.append_many({"nodes": syn.nodes_frame(), "gpus": gpus, "runs": run})
        return
    # A later run on the same cluster (e.g. the next job after this one) shares its inventory.
    if known != list(zip(gpus["host"], gpus["gpu"].astype(int), strict=True)):
        raise ValueError(
            f"store {store.path} holds another cluster's GPUs; replay {sc.name} into a fresh store"
        )
    store.append_many({"runs": run})


def replay(
    store: Store,
    sc: Scenario,
    seed: int = 0,
    *,
    interval_s: float | None = None,
    speed: float | None = None,
    prefill_s: float = 0.0,
    until_s: float | None = None,
    batch_ticks: int | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    sink: BatchSink | None = None,
) -> ReplayResult:
    """Replay ``sc`` into ``store``. ``speed=None`` backfills everything as fast as possible;
    otherwise the first ``prefill_s`` simulated seconds are backfilled and the rest streams at
    ``speed`` simulated seconds per wall second until the run ends or ``stop`` is set. The
    windows go through ``sink`` (default: a ``StoreWriter`` on ``store``), and so do the rollups
    (``Settle``: the writer's steps); the run's registration is the store's own."""
    sink = sink or StoreWriter(store)
    source = prepare(store, sc, seed, interval_s, until_s, batch_ticks)
    end = min(sc.duration_s, until_s if until_s is not None else sc.duration_s)
    started = time.perf_counter()
    check_fits(source, sink)
    fill_end = end if speed is None else min(prefill_s, end)
    rows = _backfill(store, source, sink, fill_end, end, progress, stop)
    synced = sync_roles(store, source.syn, None)
    if speed is not None and source.left:
        # the backfilled hours in the node and fleet levels now, not at the first live tick:
        # `make demo`'s heatmap said "No GPU samples in this range" for its first ~15 s
        sink.write(Settle())
        rows += _live(store, source, sink, speed, end, progress, stop, synced)
    sink.write(Settle())
    done = min(source.t_prev, end)
    stopped = bool(source.left) and stop is not None and stop.is_set()
    return ReplayResult(source.syn.run_id, rows, done, time.perf_counter() - started, stopped)


def prepare(
    store: Store,
    sc: Scenario,
    seed: int = 0,
    interval_s: float | None = None,
    until_s: float | None = None,
    batch_ticks: int | None = None,
    window_samples: int = WINDOW_SAMPLES,
) -> ReplaySource:
    """Register the run of ``sc`` in ``store`` (ValueError if it is there already, or the
    store holds another cluster) and return the source that yields its windows (of
    ``batch_ticks`` ticks, or by default of about ``window_samples`` cut at bucket ends)."""
    interval = float(interval_s or sc.sample_interval_s)
    if interval <= 0:
        raise ValueError("sample interval must be positive")
    syn = Synthesizer(simulate(sc, seed), seed, interval, run_id_for(sc, seed))
    _register(store, sc, seed, syn, interval)
    end = min(sc.duration_s, until_s if until_s is not None else sc.duration_s)
    ticks = np.arange(interval, end + 1e-9, interval)
    align = 0
    if batch_ticks is None:
        batch_ticks, align = window_ticks(syn.n_gpus, interval, window_samples)
    return ReplaySource(syn, ticks, batch_ticks, align)


def window_ticks(gpus: int, interval_s: float, samples: int = WINDOW_SAMPLES) -> tuple[int, int]:
    """Ticks per backfill window (about ``samples`` samples) and the per-GPU bucket (s) its ends
    fall on: the coarsest level kept at this interval (``rollups.gpu_levels_for``) of which a
    whole number of buckets makes at most twice that, so every window hands its buckets over
    whole (``replay.partials``); 0 where none fits."""
    ticks = max(1, int(samples // gpus))
    for level in reversed(gpu_levels_for(interval_s)):
        per = level / interval_s
        if per == int(per) and per <= 2 * ticks:
            return int(per) * max(1, round(ticks / per)), level
    return ticks, 0


def _backfill(
    store: Store,
    source: ReplaySource,
    sink: BatchSink,
    until: float,
    end: float,
    progress: Progress | None,
    stop: threading.Event | None,
) -> int:
    """Synthesise on this thread, insert on a writer thread: NumPy and DuckDB both release the
    GIL, so on two cores the two halves overlap."""
    q: queue.Queue[Tables | None] = queue.Queue(maxsize=2)
    errors: list[BaseException] = []
    written = [0]
    last_rollup = [time.monotonic()]
    start = source.syn.sc.start

    def writer() -> None:
        while (batch := q.get()) is not None:
            if errors:
                continue
            try:
                w = sink.write(batch)
                source.settle(batch.ts, batch, w)
                if time.monotonic() - last_rollup[0] > ROLLUP_EVERY_S:
                    sink.write(Settle(until=batch.ts))
                    last_rollup[0] = time.monotonic()
                written[0] += batch.rows
                if progress:
                    progress((batch.ts - start).total_seconds(), end, written[0])
            except BaseException as exc:  # surfaced on the caller's thread below
                errors.append(exc)

    th = threading.Thread(target=writer, name="replay-writer", daemon=True)
    th.start()
    windows = source.until(until)
    try:
        while not (errors or (stop is not None and stop.is_set())):
            batch = next(windows, None)
            if batch is None:
                break
            q.put(batch)
    finally:
        q.put(None)
        th.join()
    if errors:
        raise errors[0]
    return written[0]


def _live(
    store: Store,
    source: ReplaySource,
    sink: BatchSink,
    speed: float,
    end: float,
    progress: Progress | None,
    stop: threading.Event | None,
    synced: np.ndarray,
) -> int:
    if speed <= 0:
        raise ValueError("speed must be positive (simulated seconds per wall second)")
    rows = 0
    wall0, sim0 = time.monotonic(), source.t_prev
    while source.left:
        t = float(source.ticks[source.done])  # the next tick
        delay = wall0 + (t - sim0) / speed - time.monotonic()
        if stop is not None:
            if stop.wait(max(delay, 0.0)):
                break
        elif delay > 0:
            time.sleep(delay)
        # every tick due by now, in one write and one rollup refresh: at a speed whose ticks
        # come faster than a refresh (~0.2 s), the replay keeps to the clock instead of
        # falling behind one refresh per tick
        now = max(t, sim0 + (time.monotonic() - wall0) * speed)
        for w in collect(source, sink, source.syn.abs_time(min(now, end))):
            rows += w.rows
        synced = sync_roles(store, source.syn, synced)
        sink.write(Settle())
        if progress:
            progress(source.t_prev, end, rows)
    return rows


def sync_roles(store: Store, syn: Synthesizer, synced: np.ndarray | None) -> np.ndarray:
    """Bring the GPUs' job label (what dcgm-exporter's ``hpc_job`` says) up to the simulation's
    time: a node in repair or back among the spares runs no job (its drill-down names none), a
    spare that took a failed node's place runs the job. Only nodes whose role changed since
    ``synced`` (the roles written last; None: as registered) are written. ``nodes.role`` stays
    the role each node was scheduled with: the history (idle job nodes, hot spares) reads by
    it. With them, ``gpu_job_spans`` says when each GPU held the job (``Synthesizer.job_spans``),
    so the job's figures count a failed node up to its failure and its spare from its swap-in,
    not the GPUs labelled at the end over the whole run. Returns the roles written."""
    now = syn.roles.copy()
    before = syn.initial_roles() if synced is None else synced
    changed = np.flatnonzero(now != before)
    if len(changed) or synced is None:
        with store.transaction(["gpus", "gpu_job_spans"]) as con:
            for n in changed.tolist():
                job = syn.run_id if int(now[n]) == JOB_ROLE else None
                con.execute("UPDATE gpus SET hpc_job = ? WHERE node_id = ?", [job, n])
            con.execute("DELETE FROM gpu_job_spans WHERE label = ?", [syn.run_id])
            for node, t0, t1 in syn.job_spans():
                con.execute(
                    "INSERT INTO gpu_job_spans SELECT gpu_id, ?, ?, ? FROM gpus WHERE node_id = ?",
                    [syn.run_id, syn.abs_time(t0), None if t1 is None else syn.abs_time(t1), node],
                )
    return now


def live_start(now: datetime, prefill_s: float) -> datetime:
    """Start time that puts the end of the prefill at ``now`` (whole minutes)."""
    from datetime import timedelta

    return (now - timedelta(seconds=prefill_s)).replace(second=0, microsecond=0)
