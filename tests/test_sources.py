"""The seam between sources and sinks, and the registry of sources (``telemetry.sources``):
every registered source, run for a round against a real store, reports its health and shows
up on the target view; a source added by registration alone gets its options, is run by
``factoryfloor ingest`` and lands in the store."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app import cli
from telemetry import sources
from telemetry.collect.dcgm.scrape_source import ScrapeSource, TargetSource
from telemetry.collect.logs.formats import FORMATS, format_for
from telemetry.collect.logs.import_source import ImportSource
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import cadence, collect, run_rounds
from telemetry.ingest.forward import Forwarder
from telemetry.ingest.http_api import IngestService
from telemetry.ingest.seam import (
    Batch,
    Health,
    HealthBook,
    Option,
    Records,
    Round,
    Source,
    SourceContext,
    SourceSpec,
    Written,
)
from telemetry.ingest.spool import Spool
from telemetry.ingest.writer import StoreWriter
from telemetry.queries import data_extent
from telemetry.queries.overview import latest_sample_and_round
from telemetry.queries.targets import has_targets, target_alerts, target_health
from telemetry.replay.runner import prepare, replay
from telemetry.replay.scenarios import get_scenario
from telemetry.store import Store
from tests.conftest import ExporterHandler, free_port
from tests.conftest import cli as run_cli

T0 = datetime(2026, 3, 1, 12, 0, 0)
NOW = datetime.utcnow().replace(microsecond=0)


def metrics_file(path: Path, steps: int = 5, ts: float = 1_795_000_000.0) -> Path:
    rows = [{"run": "job-1", "step": s, "ts": ts + s, "loss": 3.0} for s in range(steps)]
    lines = [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- one round of every registered source against a real store ------------------------------
def _scrape(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    urls = [f"{exporter}/default_h100/metrics", f"{exporter}/nothing/metrics"]
    source = ScrapeSource(TargetSource(urls, [], print), 15.0, 2.0)
    collect(source, StoreWriter(store), T0)
    return source, T0


def _import(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    source = ImportSource([str(metrics_file(tmp / "m.jsonl"))], "train_metrics", None)
    collect(source, StoreWriter(store), NOW)
    return source, NOW


def _api(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    service = IngestService(store, clock=lambda: NOW)
    service.write_records("train_metrics", [{"run": "job-2", "step": 1, "loss": 2.0}])
    return service.posted, NOW


def _replay(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    source = prepare(store, get_scenario("dev-64").with_overrides(start=T0), 0, until_s=600)
    at = T0 + timedelta(seconds=600)  # the replay's clock is simulated time
    written = collect(source, StoreWriter(store), at)
    assert sum(w.rows for w in written) == source.syn.n_gpus * 60  # ten minutes at 10 s
    return source, at


def _cluster(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    from telemetry.collect.logs.cluster_source import ClusterSource

    log = tmp / "train.log"
    log.write_text("[2026-03-01 12:00:00] iteration       10/  100 | lm loss: 2.5E+00 |\n")
    source = ClusterSource(globs=[str(tmp / "*.log")], run="job-3", follow=True)
    written = collect(source, StoreWriter(store), NOW)
    assert sum(w.rows for w in written if not w.duplicate) >= 1
    return source, NOW


def _checkpoints(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    from telemetry.collect.checkpoints.ckpt_source import CheckpointSource

    ckpt = tmp / "ckpt"
    (ckpt / "checkpoint-10").mkdir(parents=True)
    (ckpt / "checkpoint-10" / "trainer_state.json").write_text("{}")
    source = CheckpointSource([("pfs", str(ckpt))], run="job-3", follow=True)
    written = collect(source, StoreWriter(store), NOW)
    assert sum(w.rows for w in written if not w.duplicate) >= 1
    return source, NOW


def _prometheus(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    """A server that refuses: the source's own row says so (tests/test_prom_source.py reads
    real Prometheus and VictoriaMetrics servers)."""
    from telemetry.collect.prometheus.prom_client import PromClient
    from telemetry.collect.prometheus.prom_source import PromServer, PromSource

    url = f"http://127.0.0.1:{free_port()}"
    source = PromSource([PromServer(PromClient(url), 15.0, log=print)], 15.0)
    collect(source, StoreWriter(store), NOW)
    (h,) = source.health()
    assert not h.up and h.error and "connection refused" in h.error
    return source, NOW


def _slurm(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    """Recorded outputs of the real test cluster (tests/test_slurm_live.py runs it live)."""
    from telemetry.collect.slurm.slurm_client import SlurmClient, recorded_runner
    from telemetry.collect.slurm.slurm_source import SlurmSource

    rec = Path(__file__).parent / "fixtures" / "slurm" / "drained"
    source = SlurmSource(SlurmClient(runner=recorded_runner(str(rec))), follow=False,
                         since=datetime(2020, 1, 1))  # fmt: skip
    written = collect(source, StoreWriter(store), NOW)
    # 17 job records, the pending job, the node, its drain and the maintenance reservation
    assert sum(w.rows for w in written) >= 21
    return source, NOW


def _flight_recorder(tmp: Path, store: Store, exporter: str) -> tuple[Source, datetime]:
    """A folder without dumps yet: up, no hang (tests/test_flight_recorder.py reads a real
    job's dumps as they land)."""
    from telemetry.collect.logs.fr_source import FlightRecorderSource

    (tmp / "fr").mkdir()
    source = FlightRecorderSource(str(tmp / "fr"), "job-4")
    collect(source, StoreWriter(store), NOW)
    (h,) = source.health()
    assert h.up and h.rows == 0
    return source, NOW


ROUNDS: dict[str, Callable[[Path, Store, str], tuple[Source, datetime]]] = {
    "scrape": _scrape,
    "import": _import,
    "api": _api,
    "replay": _replay,
    "cluster": _cluster,
    "checkpoints": _checkpoints,
    "prometheus": _prometheus,
    "slurm": _slurm,
    "flight_recorder": _flight_recorder,
}


def test_every_registered_source_is_tested_here() -> None:
    assert set(ROUNDS) == set(sources.names()), "add a round for the new source to ROUNDS"
    assert len(set(sources.names())) == len(sources.SOURCES)
    for spec in sources.SOURCES:
        assert spec.name and spec.summary and ":" not in spec.name
        assert spec.name not in ("http", "https")  # its rows would pass for scrape targets


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_a_registered_source_shows_its_health_on_the_target_view(
    name: str, tmp_path: Path, exporter: str
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        source, at = ROUNDS[name](tmp_path, store, exporter)
        assert source.name == name
        health = source.health()
        assert health, f"{name} reports no health"
        shown = target_health(store, at)
        for h in health:
            row = shown[shown["target"] == h.target]
            assert len(row) == 1, (h.target, shown["target"].tolist())
            assert row["status"].iloc[0] == ("up" if h.up else "down")
            if name != "scrape":
                assert h.target.startswith(f"{name}:")


def test_the_scrape_source_reports_the_sinks_verdict_per_target(
    tmp_path: Path, exporter: str
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        source, _ = _scrape(tmp_path, store, exporter)
        by_url = {h.target: h for h in source.health()}
        up = by_url[f"{exporter}/default_h100/metrics"]
        down = by_url[f"{exporter}/nothing/metrics"]
        assert up.up and up.last_success == T0 and up.rows > 8 * 20
        assert not down.up and down.error and down.last_success is None


# -- the loop: clock injected, any source into any sink that takes it ----------------------
def test_run_rounds_stamps_each_round_with_the_injected_clock(
    tmp_path: Path, exporter: str
) -> None:
    times = iter([T0, T0 + timedelta(seconds=15), T0 + timedelta(seconds=30)])
    lines: list[str] = []
    stop = threading.Event()
    with Store(str(tmp_path / "s.duckdb")) as store:
        # rounds every 0.3 s (the source's own cadence), stamped 15 s apart by the clock
        source = ScrapeSource(TargetSource([f"{exporter}/default_h100/metrics"], [], print), 0.3, 2)

        def clock() -> datetime:
            t = next(times, None)
            if t is None or t == T0 + timedelta(seconds=30):
                stop.set()
            return t or T0

        n = run_rounds(source, StoreWriter(store), stop, lines.append, clock=clock)
        stamps = [t for (t,) in store.rows("SELECT DISTINCT ts FROM gpu_samples ORDER BY ts")]
    assert n == 3 and stamps == [T0, T0 + timedelta(seconds=15), T0 + timedelta(seconds=30)]
    stored = [ln for ln in lines if " stored: 1/1 targets up, 8 GPU samples" in ln]
    assert [ln.split()[1] for ln in stored] == [t.isoformat() for t in stamps], lines


def test_a_sink_that_cannot_take_a_source_is_refused_before_the_first_round(
    tmp_path: Path,
) -> None:
    source = ImportSource([str(metrics_file(tmp_path / "m.jsonl"))], "train_metrics", None)
    spool = Spool(str(tmp_path / "spool"), 2**20)
    try:
        fwd = Forwarder("http://127.0.0.1:9", spool)
        with pytest.raises(FactoryFloorError, match=r"the import source writes a store, which "
                           r"forwarding to --server cannot carry \(Records"):
            run_rounds(source, fwd, threading.Event(), print, once=True)
        assert spool.pending() == []
    finally:
        spool.close()


def test_a_failed_write_is_logged_settled_and_the_round_goes_on(
    tmp_path: Path, exporter: str
) -> None:
    """A store that refuses scrape rounds (it holds a replay): the loop logs the reason and
    the source reports the target down with it, as the daemon's --once exit status needs."""
    with Store(str(tmp_path / "replay.duckdb")) as store:
        replay(store, get_scenario("dev-64").with_overrides(start=T0), 0, until_s=60)
        url = f"{exporter}/default_h100/metrics"
        source = ScrapeSource(TargetSource([url], [], print), 15.0, 2.0)
        lines: list[str] = []
        collect(source, StoreWriter(store), T0, lines.append)
    assert len(lines) == 1 and "not stored: store" in lines[0] and "holds replay data" in lines[0]
    (h,) = source.health()
    assert h.target == url and not h.up and "holds replay data" in (h.error or "")


# -- the target view keeps exporters apart from other sources ------------------------------
@contextmanager
def one_exporter() -> Iterator[str]:
    """A dcgm-exporter of its own on 127.0.0.1 (conftest's fixture routes), to stop at will."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ExporterHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_other_sources_do_not_hide_an_exporter_outage_or_move_the_range(
    tmp_path: Path,
    exporter: str,  # the fixture sets the routes
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        writer = StoreWriter(store)
        with one_exporter() as address:
            targets = TargetSource([f"{address}/default_h100/metrics"], [], print)
            source = ScrapeSource(targets, 15.0, 2.0)
            collect(source, writer, T0)
        collect(source, writer, T0 + timedelta(minutes=1))  # the exporter is gone
        assert latest_sample_and_round(store).all_down
        # the training job goes on posting while no exporter answers: still all down
        service = IngestService(store, clock=lambda: T0 + timedelta(minutes=2))
        posted = [{"run": "j", "step": 1, "loss": 1.0, "ts": str(T0)}]
        service.write_records("train_metrics", posted)
        latest = latest_sample_and_round(store)
        assert latest.all_down and latest.round == T0 + timedelta(minutes=1)
        # an import of old logs is not new data: the range ends at the newest scrape round
        old = metrics_file(tmp_path / "old.jsonl", ts=1_700_000_000)
        collect(ImportSource([str(old)], "train_metrics", "old"), writer, NOW)
        ext = data_extent(store)
        assert ext is not None and ext.end == T0 + timedelta(minutes=1)


def test_a_replay_alone_has_no_targets_and_an_import_does(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        replay(store, get_scenario("dev-64").with_overrides(start=T0), 0, until_s=120)
        assert store.scalar("SELECT count(*) FROM targets WHERE target = 'replay:dev-64-s0'") > 0
        assert not has_targets(store)
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"run": "x", "step": -1, "loss": 1}\n')
        collect(ImportSource([str(bad)], "train_metrics", None), StoreWriter(store), NOW)
        assert has_targets(store)
        (alert,) = target_alerts(store, NOW)
        assert alert[1] == "1 source down" and f"import:{bad}" in alert[2]


# -- import formats --------------------------------------------------------------------------
def test_at_most_one_format_recognises_a_path(tmp_path: Path) -> None:
    (tmp_path / "tb").mkdir()
    paths = ["m.jsonl", "m.ndjson", "m.json", "m.csv", "events.out.tfevents.1.host", "tb"]
    for name in paths:
        if name != "tb":
            (tmp_path / name).touch()
        claims = [f.name for f in FORMATS if f.recognises(str(tmp_path / name))]
        assert len(claims) == 1, (name, claims)
    (tmp_path / "m.txt").touch()
    with pytest.raises(FactoryFloorError, match=r"expected \.jsonl, \.json, \.csv, or a Tens"):
        format_for(str(tmp_path / "m.txt"), "train_metrics", None)


# -- a source added by registration alone ----------------------------------------------------
class LinesSource:
    """A toy tailed log: each poll stores the lines appended since the last stored one."""

    name = "lines"
    produces = (Records,)
    health_rows = True
    interval_s = 15.0

    def __init__(self, path: str) -> None:
        self.path, self.done, self.book = path, 0, HealthBook()

    def poll(self, now: datetime) -> Iterator[Records]:
        lines = Path(self.path).read_text().splitlines()[self.done :]
        if lines:
            yield Records("train_metrics", [json.loads(x) for x in lines], f"lines:{self.path}")

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        assert isinstance(batch, Records)
        if written.ok:
            self.done += len(batch.records)
        self.book.record(now, batch.target, written.ok, written.error, written.rows)

    def health(self) -> list[Health]:
        return self.book.all()


def _build_lines(values: Mapping[str, Any], ctx: SourceContext) -> LinesSource | None:
    return LinesSource(values["lines"]) if values.get("lines") else None


LINES = SourceSpec(
    "lines",
    "a JSON-lines log, tailed",
    options={"ingest": (Option("--lines", {"metavar": "FILE", "help": "tail FILE"}),)},
    build=_build_lines,
    ask="--lines FILE",
)


def test_a_source_registered_in_one_line_runs_in_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sources, "SOURCES", (*sources.SOURCES, LINES))
    with pytest.raises(SystemExit):
        cli.main(["ingest", "--help"])
    assert "--lines FILE" in capsys.readouterr().out
    assert cli.main(["ingest", "--store", str(tmp_path / "x.duckdb")]) == 1
    err = capsys.readouterr().err
    assert "give at least one --target or a --targets-file, or " in err
    assert err.rstrip().endswith("or --lines FILE")
    log = metrics_file(tmp_path / "train.jsonl", steps=7)
    store = tmp_path / "s.duckdb"
    assert cli.main(["ingest", "--store", str(store), "--lines", str(log), "--once"]) == 0
    with Store(str(store), read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM train_metrics") == 7
        assert s.rows("SELECT target, up, samples FROM targets") == [(f"lines:{log}", True, 7)]


def test_prometheus_with_server_is_refused_in_one_line(tmp_path: Path) -> None:
    """Forwarding the Prometheus source's rounds is not supported yet: said in one line,
    before any request, with what to do instead."""
    p = run_cli("ingest", "--server", "http://127.0.0.1:9", "--spool", str(tmp_path / "spool"),
            "--prometheus", "http://127.0.0.1:9", "--once")  # fmt: skip
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        "factoryfloor: error: the prometheus source writes a store, which forwarding to "
        "--server cannot carry (HealthBatch): give --store instead"
    )


def test_each_source_owns_its_cadence_and_the_store_follows_the_rounds(
    tmp_path: Path, exporter: str
) -> None:
    """One owner per cadence (#35, 5): the loop runs at what its sources ask for, a group of
    read-once sources runs one round, and the store's sample interval is that of the rounds
    it holds (not what the command that opened it was told)."""
    url = f"{exporter}/default_h100/metrics"
    fast, slow = (ScrapeSource(TargetSource([url], [], print), s, 2) for s in (30.0, 60.0))
    once = ImportSource([str(metrics_file(tmp_path / "m.jsonl"))], "train_metrics", None)
    assert cadence([slow, fast]) == 30.0 and cadence([once]) == 0.0
    stop = threading.Event()  # never set: a read-once group must end by itself
    with Store(str(tmp_path / "s.duckdb")) as store:
        assert run_rounds([once], StoreWriter(store), stop, print) == 1
        assert run_rounds(slow, StoreWriter(store, rounds=True), stop, print, once=True) == 1
        assert store.sample_interval_s() == 60.0  # taken from the round, set by no one else
        StoreWriter(store).write(Round(T0, [], 30.0))  # a round of another cadence
        assert store.sample_interval_s() == 30.0


def test_import_hands_each_path_to_the_source_that_recognises_it(tmp_path: Path) -> None:
    """``import`` asks the sources' own recognisers (``sources.IMPORTERS``, dumps first): a
    flight-recorder dump by its content (a file, or the folder of a job's), a text log, and
    what neither takes to the records source, which says what it cannot read."""
    dumps = tmp_path / "fr"
    dumps.mkdir()
    head = {"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": []}
    (dumps / "rank_0").write_text(json.dumps(head))
    log = tmp_path / "slurm-1.out"
    log.write_text("[2026-03-01 12:00:00] iteration       10/  100 | lm loss: 2.5E+00 |\n")
    records = tmp_path / "metrics.jsonl"
    records.write_text('{"run": "r", "step": 1}\n')
    missing = tmp_path / "nowhere.jsonl"
    paths = [records, dumps, log, dumps / "rank_0", missing]
    assert sources.claim([str(p) for p in paths]) == {
        "flight_recorder": [str(dumps), str(dumps / "rank_0")],
        "cluster": [str(log)],
        "import": [str(records), str(missing)],
    }
