"""Whether a run's data says it finished by a time, and how: its planned steps reached,
"Training completed", "[after training is done]", Lightning's ``max_steps`` reached, the
trainer exiting on purpose at the end of its data (Megatron-LM's "exiting program ..." of
``--exit-duration-in-mins``/``--exit-interval``), its last Slurm job COMPLETED, or its record's
end passed. A finished run is not stalled: nothing is expected of it after its end (a run that
goes on after an exit interval is running again: only an end after the last progress counts).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from telemetry.signals import PLANNED_EXIT
from telemetry.store import Store

FINISHED = "finished"
_SLACK = timedelta(seconds=1)  # a line stamped to the second before its progress point


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
    rec = store.rows("SELECT end_ts, simulated FROM runs WHERE run_id = ?", [run_id])
    end, simulated = rec[0] if rec else (None, None)
    if end is not None and end <= at and (last is None or last <= end):
        detail = ("the simulated run ends (the replay's last simulated time)" if simulated
                  else "the run's record says it ended")  # fmt: skip
        return {"state": FINISHED, "ts": end, "detail": detail, "origin": "run record"}
    return None
