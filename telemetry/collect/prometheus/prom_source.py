"""The Prometheus-API source: DCGM series read from a Prometheus-compatible server.

``factoryfloor ingest --store s.duckdb --prometheus http://prometheus:9090`` reads what the
cluster's Prometheus (VictoriaMetrics, Thanos Query, Mimir) already scrapes from every
dcgm-exporter, instead of a second scraper hitting each exporter. Each round is the server's
latest values (``/federate``; ``/api/v1/query`` where there is no federation endpoint) regrouped
into one exporter page per ``instance``: the same ``Round`` of ``Fetch``es a direct scrape makes,
so the same sink validates, stores, derives XID events and judges staleness, and the target
view shows each exporter under its own address (``http://<instance>/metrics``), with
Prometheus's ``up`` and last scrape error when it is down.

History comes from ``/api/v1/query_range``: ``--since 6h`` backfills the last six hours before
the first live round, in chunks sized to the series count (a progress bar on a terminal), one
round per ``--interval`` step on a grid aligned to the epoch. The same path fills any gap: a
round that finds the last stored one more than 1.5 intervals back (the server was unreachable,
a round overran) queries the missed steps first. Rounds are stored oldest first, each with a
batch id made of the server and the round's time, so a round written twice (a restarted
backfill) is stored once; the fill advances only past rounds the sink took, so a server killed
mid-backfill costs a retry, never data.

Labels the server adds to every series of a target (``instance``, ``job``, file_sd and relabel
labels: exactly the labels of the target's ``up`` series) are taken off again, so a sample
looks as the exporter printed it and its extra fields keep their names; ``instance`` names the
target, and attribution labels (``pod``, ``namespace``, ``hpc_job``...) are kept as the gpus
table's columns. An unreachable or refusing server is the row ``prometheus:<url>``, down with
its reason.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from telemetry.collect.prometheus.prom_client import PromAccess, PromClient, PromDown, read_secret
from telemetry.errors import FactoryFloorError
from telemetry.ingest.regroup import META, Regrouper, Snapshot, _naive
from telemetry.ingest.seam import Batch, Health, Option, Round, SourceContext, SourceSpec, Written
from telemetry.ingest.since import SINCE, since_seconds

DEFAULT_MATCH = '{__name__=~"DCGM_.*"}'
META_MATCH = '{__name__=~"up|scrape_duration_seconds"}'
MAX_POINTS = 11_000  # Prometheus refuses a query_range of more points per series
SAMPLES_PER_QUERY = 400_000  # one chunk's answer: ~15 MB of JSON
GAP_FACTOR = 1.5  # a last round further back than this many intervals leaves a gap to fill
def _epoch(ts: datetime) -> float:
    return ts.replace(tzinfo=UTC).timestamp()


def federated(text: str, rg: Regrouper) -> tuple[Snapshot, int]:
    """A ``/federate`` answer as a snapshot, and how many of its lines were not samples."""
    from telemetry.ingest.exposition import parse

    scrape = parse(text)
    snap = Snapshot(samples=len(scrape))
    names, ids, sets = scrape.names, scrape.label_ids.tolist(), scrape.label_sets
    values = scrape.values.tolist()
    order = [i for i, n in enumerate(names) if n in META]
    for i in order:
        rg.meta(snap, names[i], dict(sets[ids[i]]), values[i])
    lines = snap.lines
    for i, name in enumerate(names):
        if name in META:
            continue
        inst, head = rg.prefix(name, sets[ids[i]])
        lines.setdefault(inst, []).append(head + repr(values[i]))
    return snap, len(scrape.errors)


def vector(result: list[dict[str, Any]], meta: list[dict[str, Any]], rg: Regrouper) -> Snapshot:
    """An instant query's answer (DCGM series, then meta series) as a snapshot."""
    snap = Snapshot(samples=len(result))
    for s in meta:
        m = s.get("metric", {})
        rg.meta(snap, m.get("__name__", ""), m, float(s["value"][1]))
    for s in result:
        name, labels = _name_labels(s.get("metric", {}))
        inst, head = rg.prefix(name, labels)
        snap.lines.setdefault(inst, []).append(head + str(s["value"][1]))
    return snap


def matrix(
    result: list[dict[str, Any]], meta: list[dict[str, Any]], rg: Regrouper, t0: float, step: float
) -> list[Snapshot]:
    """A range query's answers (``n`` steps from ``t0``) as one snapshot per step."""
    n = 1 + max(
        (round((float(v[-1][0]) - t0) / step) for s in result + meta if (v := s.get("values"))),
        default=-1,
    )
    snaps = [Snapshot() for _ in range(n)]
    for s in meta:
        m = s.get("metric", {})
        for t, v in s.get("values", ()):
            rg.meta(snaps[round((float(t) - t0) / step)], m.get("__name__", ""), m, float(v))
    for s in result:
        name, labels = _name_labels(s.get("metric", {}))
        inst, head = rg.prefix(name, labels)
        for t, v in s.get("values", ()):
            snap = snaps[round((float(t) - t0) / step)]
            snap.lines.setdefault(inst, []).append(head + v)
            snap.samples += 1
    return snaps


def _name_labels(metric: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return metric.get("__name__", ""), tuple(
        sorted((k, v) for k, v in metric.items() if k != "__name__")
    )


# -- one server ---------------------------------------------------------------------------------
class PromServer:
    """One server's rounds: the gap (or ``--since`` backfill) first, then the live round."""

    def __init__(
        self,
        client: PromClient,
        interval_s: float,
        match: str = DEFAULT_MATCH,
        since_s: float | None = None,
        mode: str = "auto",
        log: Any = print,
        progress: bool | None = None,
    ) -> None:
        self.client, self.step, self.match, self.since_s = client, interval_s, match, since_s
        self.mode, self.log, self.progress = mode, log, progress
        self.name = f"prometheus:{client.url}"
        self.rg = Regrouper()
        self.last_ts: datetime | None = None  # the newest round the sink took
        self.fill_after: float | None = None  # rounds after this unix time are missing
        self.series = 0  # DCGM series in the last answer: sizes the next range chunk
        self.health = Health(self.name, False, "not asked yet")
        self._refused = False

    def batch_id(self, ts: datetime) -> str:
        return f"{self.name}@{ts.isoformat()}"

    def rounds(self, now: datetime) -> Iterator[Round]:
        t0 = _now_s()
        self._refused = False
        if self.fill_after is None:
            if self.last_ts is None and self.since_s:
                self.fill_after = _epoch(now) - self.since_s - self.step / 2
            elif self.last_ts is not None and (now - self.last_ts).total_seconds() > (
                GAP_FACTOR * self.step
            ):
                self.fill_after = _epoch(self.last_ts)
        try:
            if self.fill_after is not None:
                yield from self._fill(_epoch(now))
                if self._refused:
                    return
                self.fill_after = None
            # the live round is stamped when it is read, not when a long fill began
            at = now + timedelta(seconds=_now_s() - t0)
            snap, rejected = self._latest(_epoch(at))
            fetches = self.rg.fetches(snap, self._errors(snap))
            yield Round(at, fetches, self.step, self.batch_id(at))
            self._up(at, snap.samples, rejected, _now_s() - t0)
        except PromDown as exc:
            self.log(f"{self.name} down: {exc}")
            self.health = Health(
                self.name, False, str(exc), self.health.last_success, 0, 0, _now_s() - t0
            )
            if self.fill_after is None:  # from the last stored round (or this one) on
                self.fill_after = _epoch(self.last_ts or now) - (0 if self.last_ts else 1e-3)

    def settle(self, batch: Round, written: Written) -> None:
        if written.ok:
            if self.last_ts is None or batch.ts > self.last_ts:
                self.last_ts = batch.ts
            if self.fill_after is not None:
                self.fill_after = max(self.fill_after, _epoch(batch.ts))
        else:
            self._refused = True

    # -- pieces ---------------------------------------------------------------------------------
    def _latest(self, now_s: float) -> tuple[Snapshot, int]:
        if self.mode in ("auto", "federate"):
            try:
                snap, rejected = federated(self.client.federate([self.match, META_MATCH]), self.rg)
                self.series = snap.samples
                return snap, rejected
            except PromDown as exc:  # Thanos Query and Mimir have no /federate
                if self.mode == "federate" or not re.search(r"HTTP (404|405|501)", str(exc)):
                    raise
                self.log(f"{self.name}: no /federate ({exc}); using instant queries")
                self.mode = "query"
        snap = vector(
            self.client.query(self.match, now_s), self.client.query(META_MATCH, now_s), self.rg
        )
        self.series = snap.samples
        return snap, 0

    def _errors(self, snap: Snapshot) -> Mapping[tuple[str, str], str]:
        down = any(v != 1.0 for i, v in snap.up.items() if snap.job.get(i) in self.rg.jobs)
        return self.client.target_errors() if down else {}

    def _fill(self, now_s: float) -> Iterator[Round]:
        """Every missing step after ``fill_after`` and before the live round, in chunks."""
        assert self.fill_after is not None
        first = math.floor(self.fill_after / self.step + 0.5) + 1
        last = math.ceil((now_s - self.step / 2) / self.step) - 1
        steps = np.arange(first, last + 1, dtype=np.float64) * self.step
        if not len(steps):
            return
        bar = _bar(len(steps), self.name, self.progress)
        try:
            i = 0
            while i < len(steps):
                n = max(1, min(MAX_POINTS, SAMPLES_PER_QUERY // max(self.series, 1)))
                if not self.series:
                    n = min(n, 8)  # a probe: the answer tells how many series there are
                chunk = steps[i : i + n]
                t0, t1 = float(chunk[0]), float(chunk[-1])
                result = self.client.query_range(self.match, t0, t1, self.step)
                meta = self.client.query_range(META_MATCH, t0, t1, self.step)
                self.series = max(len(result), 1)
                snaps = matrix(result, meta, self.rg, t0, self.step)
                for k, t in enumerate(chunk.tolist()):
                    snap = snaps[k] if k < len(snaps) else Snapshot()
                    if not snap.lines and not snap.up:
                        continue  # nothing at that step (the server was not scraping either)
                    ts = _naive(t)
                    yield Round(ts, self.rg.fetches(snap, {}), self.step, self.batch_id(ts))
                    if self._refused:
                        return
                i += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()

    def _up(self, now: datetime, samples: int, rejected: int, took: float) -> None:
        self.health = Health(self.name, True, None, now, samples, rejected, took)


def _now_s() -> float:
    import time

    return time.monotonic()


def _bar(total: int, name: str, show: bool | None) -> Any:
    if total < 2 or show is False:
        return None
    from tqdm import tqdm

    return tqdm(
        total=total, unit="round", desc=f"backfill {name}", file=sys.stderr, disable=show is None
        and not sys.stderr.isatty(), leave=False
    )


class PromSource:
    name = "prometheus"
    produces = (Round,)
    health_rows = True  # one row per server; each exporter's row comes with its round

    def __init__(self, servers: list[PromServer], interval_s: float) -> None:
        self.servers, self.interval_s = servers, interval_s
        self._of: dict[str, PromServer] = {}

    def poll(self, now: datetime) -> Iterator[Batch]:
        for srv in self.servers:
            for rnd in srv.rounds(now):
                self._of[rnd.batch_id or ""] = srv
                yield rnd

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if isinstance(batch, Round) and (srv := self._of.pop(batch.batch_id or "", None)):
            srv.settle(batch, written)

    def health(self) -> list[Health]:
        return [s.health for s in self.servers]


def build(values: Mapping[str, Any], ctx: SourceContext) -> PromSource | None:
    urls = values.get("prometheus") or []
    extras = [f"--{k.replace('_', '-')}" for k, v in values.items() if v and k != "prometheus"]
    if not urls:
        if extras:
            raise FactoryFloorError(f"{', '.join(extras)} need(s) --prometheus URL")
        return None
    try:
        since = since_seconds(values.get("since"))
        access = PromAccess(
            tenant=values.get("prometheus_tenant"),
            user=values.get("prometheus_user"),
            password=_secret(values, "prometheus_password_file", "--prometheus-password-file"),
            bearer=_secret(values, "prometheus_token_file", "--prometheus-token-file"),
            ca_file=values.get("prometheus_ca_file"),
        )
        if access.ca_file:
            open(access.ca_file, "rb").close()
        timeout = max(ctx.timeout_s, 30.0)
        servers = [
            PromServer(
                PromClient(u, access, timeout),
                ctx.interval_s,
                values.get("prometheus_match") or DEFAULT_MATCH,
                since,
                values.get("prometheus_mode") or "auto",
                ctx.log,
            )
            for u in dict.fromkeys(urls)
        ]
    except OSError as exc:
        raise FactoryFloorError(f"{exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise FactoryFloorError(str(exc)) from None
    return PromSource(servers, ctx.interval_s)


def _secret(values: Mapping[str, Any], key: str, flag: str) -> str | None:
    path = values.get(key)
    return read_secret(path, flag) if path else None


def _opt(flag: str, help: str, **kw: Any) -> Option:
    return Option(flag, {"help": help, **kw})


# The same options on ``ingest`` and ``serve``: a server that reads a Prometheus live also reads
# expired per-GPU series back from it for the drill-down (``prom_history``).
OPTIONS = (
    _opt(
        "--prometheus",
        "read DCGM series from this Prometheus, VictoriaMetrics, Thanos or Mimir "
        "(base URL, path prefix kept; repeatable) instead of scraping exporters",
        action="append",
        default=[],
        metavar="URL",
    ),
    SINCE,
    _opt("--prometheus-match", f"series selector (default {DEFAULT_MATCH})",
         metavar="SELECTOR"),  # fmt: skip
    _opt("--prometheus-mode", "live rounds from /federate, instant queries, or the "
         "first that works (default auto)",
         choices=("auto", "federate", "query")),  # fmt: skip
    _opt("--prometheus-tenant", "tenant ID sent as X-Scope-OrgID (Mimir, Cortex)",
         metavar="ID"),  # fmt: skip
    _opt("--prometheus-user", "HTTP basic auth user", metavar="USER"),
    _opt("--prometheus-password-file", "file holding the basic auth password",
         metavar="FILE"),  # fmt: skip
    _opt("--prometheus-token-file", "file holding a bearer token", metavar="FILE"),
    _opt("--prometheus-ca-file", "CA certificate(s) that sign the server's TLS "
         "certificate", metavar="FILE"),  # fmt: skip
)

SPEC = SourceSpec(
    name="prometheus",
    summary="DCGM series read from a Prometheus-compatible server (federate, query_range)",
    options={"ingest": OPTIONS, "serve": OPTIONS},
    build=build,
    ask="--prometheus URL",
)
