"""Slurm (``telemetry.queries.slurm``): node states, node events and job ends, jobs, and a
job's GPUs."""

from __future__ import annotations

import pandas as pd

from app.data.services import store
from telemetry.cost import money as money  # formatting re-export for the pages
from telemetry.cost import per_day_usd as per_day_usd  # the what-if's money, for the page
from telemetry.queries import TimeRange
from telemetry.queries import slurm as slurmq
from telemetry.queries.failures import LLAMA3_MTBF_H as LLAMA3_MTBF_H  # vocabulary re-export
from telemetry.queries.gpu_node import EXTRA_FIELDS as EXTRA_FIELDS  # vocabulary re-export
from telemetry.queries.gpu_node import NODE_METRICS as NODE_METRICS  # vocabulary re-export
from telemetry.utilization import CLASS_TEXT as CLASS_TEXT  # vocabulary re-export


def slurm_nodes() -> pd.DataFrame:
    return slurmq.node_states(store())


def slurm_events(tr: TimeRange) -> pd.DataFrame:
    return slurmq.node_events(store(), tr)


def slurm_jobs(tr: TimeRange) -> pd.DataFrame:
    return slurmq.jobs(store(), tr)


def slurm_job_gpus(job_id: str) -> pd.DataFrame:
    return slurmq.job_gpus(store(), str(job_id)[:64])
