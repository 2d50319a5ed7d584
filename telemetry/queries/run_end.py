"""Whether a run's data says it finished by a time, and how: its planned steps reached,
"Training completed", "[after training is done]", Lightning's ``max_steps`` reached, the
trainer exiting on purpose at the end of its data (Megatron-LM's "exiting program ..." of
``--exit-duration-in-mins``/``--exit-interval``), its last Slurm job COMPLETED, or its record's
end passed. A finished run is not stalled: nothing is expected of it after its end (a run that
goes on after an exit interval is running again: only an end after the last progress counts).

How a run that did not finish stopped, in Slurm's words (``stop_end``): its last Slurm job's end
state (sacct), else, for a run known only from its logs, Slurm's lines after its last progress
(``SIGNAL_WORDS``: ``*** JOB 123 ON node CANCELLED AT ... DUE TO TIME LIMIT ***`` is TIMEOUT, a
node failure NODE_FAIL, preemption or scancel CANCELLED); the Jobs page reads the same words.

A run known only from its logs whose log ends with none of these, and no stop the derivation
left open, has not said how it ended: ``quiet_end`` calls it "unknown" once its newest line is
older than ``QUIET`` (a log still followed and written to is running). Neither RUNNING nor
COMPLETED: a wrong state is worse than none (#57, 5).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from telemetry import signals as sig
from telemetry.signals import PLANNED_EXIT
from telemetry.store import Store

FINISHED = "finished"
_SLACK = timedelta(seconds=1)  # a line stamped to the second before its progress point
UNKNOWN = "unknown"
# A log silent this long is no longer known to be running: three times NCCL's default watchdog
# timeout (10 min), after which a hung job's ranks have raised and torchrun or Slurm has ended it
QUIET = timedelta(minutes=30)


def quiet_since(now: datetime | None = None) -> datetime:
    """The time before which a log run's newest line says nothing about it still running (naive
    UTC, as the store keeps times), to the minute: a query bound to it stays cacheable."""
    now = datetime.now(UTC).replace(tzinfo=None) if now is None else now
    return (now - QUIET).replace(second=0, microsecond=0)


STOPPED = "stopped"
# Slurm's end states of a job that did not finish (sacct's words)
STOPPED_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                  "PREEMPTED", "DEADLINE")  # fmt: skip
# Slurm's lines at a log's end and the state each says, the first that holds winning (a time
# limit's teardown also cancels steps; a node failure's too)
SIGNAL_WORDS = (
    ("TIMEOUT", (sig.SLURM_TIME_LIMIT,)),
    ("NODE_FAIL", (sig.SLURM_NODE_FAILURE, sig.NODE_LOST)),
    ("CANCELLED", (sig.SLURM_CANCELLED, sig.SLURM_PREEMPTED)),
)


def signal_words_sql(alias: str = "s") -> str:
    """``SIGNAL_WORDS`` as the WHEN clauses of an aggregate CASE over signals ``alias``."""
    return "\n".join(
        f"WHEN bool_or({alias}.kind IN ({', '.join(repr(k) for k in kinds)})) THEN '{word}'"
        for word, kinds in SIGNAL_WORDS
    )


# A run from logs only, with no Slurm job to tell its state (Slurm's word is the one kept)
LOG_ONLY = """(SELECT source IN ('import', 'logs') FROM runs WHERE run_id = ?)
  AND NOT EXISTS (SELECT 1 FROM slurm_jobs WHERE run_id = ?)"""


def run_end(store: Store, run_id: str, at: datetime) -> dict[str, Any] | None:
    """How the run finished by ``at``, if it did: {state, ts, detail, origin} (``origin`` the log's
    ``file:line``, the Slurm job, or "run record"); None while the run is (or should be)
    training. Only an end after the run's last progress point counts: a run that went on after
    an exit interval is running again."""
    last = store.scalar(
        "SELECT max(ts) FROM train_metrics WHERE run_id = ? AND ts <= ?", [run_id, at]
    )
    after = (last - _SLACK) if last is not None else datetime.min
    for ts, detail, origin in store.rows(
        """SELECT ts, detail, origin FROM signals WHERE run_id = ? AND kind = ?
           AND ts BETWEEN ? AND ? ORDER BY ts DESC LIMIT 1""",
        [run_id, PLANNED_EXIT, after, at],
    ):
        return {"state": FINISHED, "ts": ts, "detail": detail, "origin": origin}
    job = store.rows(
        """SELECT job_id, state, end_ts FROM slurm_jobs WHERE run_id = ? AND start_ts <= ?
           ORDER BY start_ts DESC, requeue DESC LIMIT 1""",
        [run_id, at],
    )
    if job and job[0][1] == "COMPLETED" and job[0][2] is not None and after <= job[0][2] <= at:
        job_id, _state, end = job[0]
        return {"state": FINISHED, "ts": end, "detail": f"Slurm job {job_id} COMPLETED",
                "origin": f"slurm job {job_id}"}
    # a run made for a Slurm job ends when its job does, whatever its state: judged above
    rec = store.rows(
        "SELECT end_ts, simulated FROM runs WHERE run_id = ? AND source IS DISTINCT FROM 'slurm'",
        [run_id],
    )
    end, simulated = rec[0] if rec else (None, None)
    if end is not None and end <= at and (last is None or last <= end):
        detail = ("the simulated run ends (the replay's last simulated time)" if simulated
                  else "the run's record says it ended")  # fmt: skip
        return {"state": FINISHED, "ts": end, "detail": detail, "origin": "run record"}
    return None


def quiet_end(store: Store, run_id: str, newest: datetime | None) -> dict[str, Any] | None:
    """{state: "unknown", ts, detail, origin} for a run known only from its logs whose newest
    line (``newest``) is older than ``QUIET`` and says nothing of how it ended (the caller has
    found no end and no open stop); None otherwise (it may still be running, or Slurm knows)."""
    if newest is None or newest >= quiet_since() or not store.scalar(
            f"SELECT {LOG_ONLY}", [run_id, run_id]):  # fmt: skip
        return None
    last = store.scalar(  # its last line: a save's end may follow the last step and signal
        "SELECT greatest(?::TIMESTAMP, max(ts)) FROM checkpoint_events WHERE run_id = ?",
        [newest, run_id])  # fmt: skip
    detail = f"no line of its log says how the job ended (its data end at {last:%Y-%m-%d %H:%M:%S})"
    # a save whose end line never came, as the log's last event: the job died in it, or the
    # log was cut; either way the end is not known, but the SRE wants to see it
    for kind, step in store.rows(
        """SELECT kind, step FROM checkpoint_events WHERE run_id = ? AND kind LIKE 'save%'
           ORDER BY ts DESC, kind = 'save_start' LIMIT 1""",
        [run_id],
    ):
        if kind == "save_start":
            detail += f"; its last save (step {step}) never logged its end"
    origin = store.scalar(  # the job's own log: the largest the run read (not a kernel log)
        "SELECT label FROM log_files WHERE run_id = ? ORDER BY bytes DESC NULLS LAST LIMIT 1",
        [run_id]) if store.has_table("log_files") else None  # fmt: skip
    return {"state": UNKNOWN, "ts": newest, "detail": detail, "origin": origin or "run's logs"}


def stop_end(store: Store, run_id: str, at: datetime) -> dict[str, Any] | None:
    """How the run stopped by ``at`` without finishing, in Slurm's words, when something says
    it: {state: "stopped", job_state, ts, detail, origin}; None otherwise. Its last Slurm job's
    end state when it has a job (after its last progress point), else Slurm's lines in its log
    after that point (``SIGNAL_WORDS``)."""
    last = store.scalar(
        "SELECT max(ts) FROM train_metrics WHERE run_id = ? AND ts <= ?", [run_id, at]
    )
    after = (last - _SLACK) if last is not None else datetime.min
    job = store.rows(
        """SELECT job_id, state, end_ts FROM slurm_jobs WHERE run_id = ? AND start_ts <= ?
           ORDER BY start_ts DESC, requeue DESC LIMIT 1""",
        [run_id, at],
    )
    if job:  # Slurm's word is the one kept, as on the Jobs page
        job_id, state, end = job[0]
        if state in STOPPED_STATES and end is not None and after <= end <= at:
            return {"state": STOPPED, "job_state": state, "ts": end,
                    "detail": f"Slurm job {job_id} {state}", "origin": f"slurm job {job_id}"}
        return None
    for word, kinds in SIGNAL_WORDS:
        for ts, detail, origin in store.rows(
            """SELECT ts, detail, origin FROM signals WHERE run_id = ? AND kind IN (SELECT
               unnest(?)) AND ts BETWEEN ? AND ? ORDER BY ts LIMIT 1""",
            [run_id, list(kinds), after, at],
        ):
            return {"state": STOPPED, "job_state": word, "ts": ts, "detail": detail,
                    "origin": origin}  # fmt: skip
    return None
