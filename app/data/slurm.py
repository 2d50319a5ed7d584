"""Slurm (``telemetry.queries.slurm``): node states, node events and job ends, jobs, and a
job's GPUs."""

from __future__ import annotations

import pandas as pd

from app.data.services import bound, store
from telemetry.queries import slurm as slurmq

slurm_nodes = bound(slurmq.node_states)
slurm_events = bound(slurmq.node_events)
slurm_jobs = bound(slurmq.jobs)


def slurm_job_gpus(job_id: str) -> pd.DataFrame:
    return slurmq.job_gpus(store(), str(job_id)[:64])
