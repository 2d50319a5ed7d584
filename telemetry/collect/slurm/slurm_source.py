"""The Slurm source: jobs, job ends, node states and drain/down reasons from the cluster that
the Slurm client's own configuration names (``SLURM_CONF``, else ``/etc/slurm``).

``factoryfloor import --store s.duckdb --slurm [--since ISO]`` polls once;
``factoryfloor ingest --store s.duckdb --slurm [--slurm-interval 60]`` (and ``serve``) polls
on that schedule. Each poll runs ``sacct`` (history from ``--since``, then from a little before
the last good poll: a job that changed since is in it), ``squeue`` (jobs now, fresher than
accounting) and ``sinfo --json``/``scontrol show node -o`` (``slurm_client``), parses them
(``slurm_parse``) and yields:

- ``slurm_jobs`` rows that are new or changed since the last poll (keyed by cluster, job id
  and requeue; the store replaces a job's row when its state moves on), with the run that
  ``--run-from-job PATTERN`` maps the job's name to;
- ``slurm_nodes`` (each node's state now) and ``slurm_node_events`` (a node whose state or
  reason changed, or that is drained/down/failing when first seen: its reason, who set it and
  when); the events of one poll are one batch keyed by their content, so importing the same
  state again stores nothing twice;
- ``slurm_reservations`` (``scontrol show reservation -o``) that are new or changed, keyed by
  name and start; one deleted before its end is stored again ending when it was found gone;
- a ``Derive``: the store attaches jobs to runs, turns job ends and node events into signals
  (``slurm_store``) and re-derives the runs' interruptions.

Health: one row per command (``slurm:sacct``, ``slurm:squeue``, ``slurm:nodes``), down with the
reason in one line (``slurm_client.SlurmError``): a missing ``sacct``, a slurmctld that is down,
accounting that is not configured. The other commands go on; nothing raises out of a poll.
States Slurm added after this was written are stored as said and counted in the health row.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import (
    Batch,
    Derive,
    Health,
    HealthBook,
    Option,
    SourceContext,
    SourceSpec,
    Tables,
    Written,
)
from telemetry.ingest.since import SINCE, since_time

INTERVAL_S = 60.0
IMPORT_LOOKBACK = timedelta(days=30)  # import without --since
INGEST_LOOKBACK = timedelta(days=1)  # the first poll of a daemon without --since
OVERLAP = timedelta(minutes=10)  # later polls ask sacct from this long before the last good one
COMMANDS = ("sacct", "squeue", "nodes", "reservations")
HEALTHY_NODE = re.compile(r"^(IDLE|ALLOCATED|ALLOC|MIXED|MIX|COMPLETING)(\+(COMPLETING|RESERVED|"
                          r"POWERED_DOWN|POWER_DOWN|CLOUD|PLANNED))*$")  # fmt: skip


def job_mapper(pattern: str | None) -> Any:
    """``--run-from-job PATTERN`` -> name -> run id or None (group 1, else the whole match)."""
    if not pattern:
        return lambda name: None
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise FactoryFloorError(
            f"--run-from-job {pattern!r}: not a regular expression: {exc}"
        ) from None
    if rx.groups > 1:
        raise FactoryFloorError(f"--run-from-job {pattern!r}: at most one group (the run id)")

    def run_of(name: str | None) -> str | None:
        m = rx.search(name or "")
        return (m.group(1) if rx.groups else m.group(0)) or None if m else None

    return run_of


class SlurmSource:
    """Polls one Slurm cluster (module doc)."""

    name = "slurm"
    produces = (Tables, Derive)
    health_rows = True

    def __init__(
        self,
        client: Any,
        since: datetime | None = None,
        interval_s: float = INTERVAL_S,
        run_from_job: str | None = None,
        follow: bool = True,
        log: Any = None,
    ) -> None:
        self.client = client
        self.since = since
        self.interval_s = interval_s
        self.follow = follow
        self.run_of = job_mapper(run_from_job)
        self.log = log or (lambda line: None)
        self.book = HealthBook()
        self._seen: dict[tuple[Any, ...], int] = {}  # job key -> digest of its row
        self._nodes: dict[str, tuple[Any, ...]] = {}  # host -> (state, reason, user, reason_ts)
        self._resv: dict[tuple[Any, ...], dict[str, Any]] = {}  # (name, start) -> its row
        self._last_poll: datetime | None = None
        self._fresh = True
        self._last_ok: dict[str, datetime] = {}
        self._errors: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}  # what the last poll found, for the command's report
        self.unknown_states: dict[str, int] = {}

    # -- polling -------------------------------------------------------------------------
    def _window(self, now: datetime) -> str:
        last = self._last_ok.get("sacct")
        if last is not None:
            start = last - OVERLAP
        else:
            start = self.since or now - (INGEST_LOOKBACK if self.follow else IMPORT_LOOKBACK)
        return start.strftime("%Y-%m-%dT%H:%M:%S")

    def _fetch(self, command: str, since: str, now: datetime) -> Any:
        from telemetry.collect.slurm.slurm_client import SlurmError
        from telemetry.collect.slurm.slurm_parse import parse

        try:
            out = self.client.fetch(command, since)
            parsed = parse(command, out.form, out.data)
        except (SlurmError, ValueError) as exc:
            self._down(command, now, str(exc))
            return None
        problems = []
        if parsed.unreadable:
            problems.append(f"{parsed.unreadable} unreadable line(s)")
        for state, n in parsed.unknown_states.items():
            self.unknown_states[state] = self.unknown_states.get(state, 0) + n
        if parsed.unknown_states:
            problems.append("unknown state(s): " + ", ".join(sorted(parsed.unknown_states)))
        self.book.record(now, f"slurm:{command}", True, None, len(parsed.rows),
                         parsed.unreadable + sum(parsed.unknown_states.values()))  # fmt: skip
        if problems:
            self.log(f"slurm {command} ({out.form}): " + "; ".join(problems))
        if self._errors.get(command):
            self.log(f"slurm {command}: answering again")
        self._errors[command] = None
        self._last_ok[command] = now
        self.counts[command] = len(parsed.rows)
        return parsed

    def _down(self, command: str, now: datetime, reason: str) -> None:
        self.book.record(now, f"slurm:{command}", False, reason)
        if self._errors.get(command) != reason:
            self.log(f"slurm source down: {reason}")
        self._errors[command] = reason

    def poll(self, now: datetime) -> Iterator[Batch]:
        if self._last_poll is not None and (now - self._last_poll).total_seconds() < (
            self.interval_s - 0.5
        ):
            self._fresh = False  # no health row either: nothing was asked
            return  # polled more often than --slurm-interval by a faster loop: not yet
        self._last_poll, self._fresh = now, True
        since = self._window(now)
        acct, queue, nodes, resv = (self._fetch(c, since, now) for c in COMMANDS)
        wrote = False
        if resv is not None and (reservations := self._reservations(resv.rows, now)) is not None:
            yield Tables({"slurm_reservations": reservations}, now, 0,
                         label=f"{len(reservations):,} Slurm reservation(s)")  # fmt: skip
        jobs = self._jobs(acct, queue, now)
        if jobs is not None:
            wrote = True
            yield Tables({"slurm_jobs": jobs}, now, 0, label=f"{len(jobs):,} Slurm job rows")
        if nodes is not None:
            for batch in self._node_batches(nodes.rows, now):
                wrote = wrote or "slurm_node_events" in batch.tables
                yield batch
        if wrote:
            yield Derive(None)

    def _jobs(self, acct: Any, queue: Any, now: datetime) -> Any:
        """The job rows that are new or changed, as a ``slurm_jobs`` frame (None: none)."""
        from telemetry.collect.slurm.slurm_parse import jobs_frame

        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        latest: dict[int, int] = {}
        cluster = None
        for r in acct.rows if acct else []:
            cluster = cluster or r["cluster"]
            rows[(r["cluster"] or "", r["job_id_raw"], r["requeue"])] = r
            latest[r["job_id_raw"]] = max(latest.get(r["job_id_raw"], 0), r["requeue"])
        for r in queue.rows if queue else []:  # fresher than accounting: what it says wins
            r["cluster"] = r["cluster"] or cluster or ""
            if r["requeue"] is None:
                r["requeue"] = latest.get(r["job_id_raw"], 0)
            key = (r["cluster"], r["job_id_raw"], r["requeue"])
            if key in rows:  # what accounting knows and the queue does not (an exit code)
                r = {**rows[key], **{k: v for k, v in r.items() if v not in (None, [])}}
            rows[key] = r
        changed = []
        for key, r in rows.items():
            r["cluster"] = r["cluster"] or ""
            mapped = self.run_of(r["name"])
            r["run_id"], r["run_source"] = mapped, "mapped" if mapped else None
            digest = hash(tuple(str(r[k]) for k in sorted(r)))
            if self._seen.get(key) != digest:
                self._seen[key] = digest
                changed.append(r)
        self.counts["jobs changed"] = len(changed)
        if not changed:
            return None
        df = jobs_frame(changed)
        df["run_id"] = [r["run_id"] for r in changed]
        df["run_source"] = [r["run_source"] for r in changed]
        df["polled_ts"] = now
        return df

    def _reservations(self, rows: list[dict[str, Any]], now: datetime) -> Any:
        """The reservations that are new or changed as a frame (None: none). One seen before
        that is gone before its end was deleted early: stored again, ending now."""
        from telemetry.collect.slurm.slurm_parse import reservations_frame

        seen = {(r["name"], r["start_ts"]): r for r in rows}
        for key, r in self._resv.items():
            if key not in seen and r["start_ts"] <= now < r["end_ts"]:
                seen[key] = {**r, "end_ts": now}
        changed = [r for key, r in seen.items() if self._resv.get(key) != r]
        self._resv = {k: r for k, r in seen.items() if r["end_ts"] > now}
        if not changed:
            return None
        df = reservations_frame(changed)
        df["polled_ts"] = now
        return df

    def _node_batches(self, rows: list[dict[str, Any]], now: datetime) -> Iterator[Tables]:
        """The node states when any changed (all of them: the store keeps the newest), and the
        events of the nodes that changed."""
        import pandas as pd

        events, changed = [], False
        for r in rows:
            key = (r["state"], r["reason"], r["reason_user"], r["reason_ts"], r.get("gpus"))
            before = self._nodes.get(r["host"])
            self._nodes[r["host"]] = key
            if before == key:
                continue
            changed = True
            if before is None and HEALTHY_NODE.match(r["state"] or "") and not r["reason"]:
                continue  # a healthy node first seen is no event
            events.append({**r, "ts": r["reason_ts"] or now, "polled_ts": now})
        if not changed:
            return
        snapshot = pd.DataFrame(rows, columns=["host", "state", "reason", "reason_user",
                                               "reason_ts", "gpus"])  # fmt: skip
        snapshot["gpus"] = pd.array(snapshot["gpus"], dtype="Int64")
        snapshot["reason_ts"] = pd.to_datetime(snapshot["reason_ts"])
        snapshot["polled_ts"] = now
        yield Tables({"slurm_nodes": snapshot}, now, 0, label=f"{len(rows):,} Slurm node states")
        self.counts["node events"] = len(events)
        if not events:
            return
        ev = pd.DataFrame(events, columns=["ts", "host", "state", "reason", "reason_user",
                                           "reason_ts", "polled_ts"])  # fmt: skip
        for c in ("ts", "reason_ts", "polled_ts"):
            ev[c] = pd.to_datetime(ev[c])
        ident = repr(sorted((e["host"], e["state"], e["reason"], str(e["reason_ts"] or e["ts"]))
                            for e in events))  # fmt: skip
        bid = "slurm:nodes:" + hashlib.sha256(ident.encode()).hexdigest()[:24]
        yield Tables({"slurm_node_events": ev}, now, 0, batch_id=bid,
                     label=f"{len(events):,} Slurm node event(s)")  # fmt: skip

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if not written.ok and isinstance(batch, Tables) and "slurm_jobs" in batch.tables:
            self._seen.clear()  # not stored: every job is new again next poll
        if not written.ok and isinstance(batch, Tables) and "slurm_node_events" in batch.tables:
            self._nodes.clear()
        if not written.ok and isinstance(batch, Tables) and "slurm_reservations" in batch.tables:
            self._resv.clear()

    def health(self) -> list[Health]:
        return self.book.all() if self._fresh else []


def build(values: Mapping[str, Any], ctx: SourceContext) -> SlurmSource | None:
    if not values.get("slurm"):
        for flag in ("since", "run_from_job", "slurm_format", "slurm_interval"):
            if values.get(flag) is not None:
                raise FactoryFloorError(f"--{flag.replace('_', '-')} needs --slurm")
        return None
    from telemetry.collect.slurm.slurm_client import SlurmClient

    interval = values.get("slurm_interval")
    interval = INTERVAL_S if interval is None else float(interval)
    if interval <= 0:
        raise FactoryFloorError("--slurm-interval must be > 0 seconds")
    return SlurmSource(
        SlurmClient(mode=values.get("slurm_format") or "auto", timeout_s=max(ctx.timeout_s, 30)),
        since=since_time(values.get("since")),
        interval_s=interval if ctx.command != "import" else 0.0,
        run_from_job=values.get("run_from_job"),
        follow=ctx.command != "import",
        log=ctx.log,
    )


_SLURM = Option(
    "--slurm",
    {"action": "store_true", "help": "read jobs, job ends and node states from Slurm "
     "(sacct, squeue, sinfo/scontrol of the cluster SLURM_CONF or /etc/slurm names)"},
)  # fmt: skip
_MAP = Option(
    "--run-from-job",
    {"metavar": "PATTERN", "help": "--slurm: a regular expression on job names; its group "
     "(or match) is the run id the job belongs to, e.g. '^(llama-\\w+)'"},
)  # fmt: skip
_FORMAT = Option(
    "--slurm-format",
    {"choices": ["auto", "json", "text"], "default": None,
     "help": "--slurm: ask for --json, the parsable text forms, or JSON where it works (auto)"},
)  # fmt: skip
_INTERVAL = Option(
    "--slurm-interval",
    {"type": float, "metavar": "S", "default": None,
     "help": f"--slurm: seconds between polls (default {INTERVAL_S:g})"},
)  # fmt: skip
SPEC = SourceSpec(
    name="slurm",
    summary="Slurm jobs, job ends and node states (sacct, squeue, sinfo/scontrol)",
    options={
        "import": (_SLURM, SINCE, _MAP, _FORMAT),
        "ingest": (_SLURM, _INTERVAL, SINCE, _MAP, _FORMAT),
        "serve": (_SLURM, _INTERVAL, SINCE, _MAP, _FORMAT),
    },
    build=build,
    ask="--slurm",
)
