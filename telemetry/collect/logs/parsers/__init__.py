"""The line formats of training jobs' and nodes' logs: one module per framework or launcher,
each declaring its ``FORMAT`` (``common.LineFormat``), registered in ``FORMATS``.

``logline`` builds its dispatch from this list: the prefilter's keywords, and each kind of
recogniser (progress, plan, checkpoint, failure, failure signature) in the order of their
places across formats. A new framework is one module here and one line in ``FORMATS``; its
verbatim logs go to ``tests/corpus/`` or ``tests/fixtures/`` and into
``tests/test_line_formats.py``."""

from __future__ import annotations

from telemetry.collect.logs.parsers import (
    deepspeed,
    hf_trainer,
    kernel,
    lightning,
    megatron,
    mpich,
    nccl,
    pytorch,
    srun,
    torchrun,
    torchtitan,
)
from telemetry.collect.logs.parsers.common import LineFormat

__all__ = ["FORMATS", "LineFormat"]

FORMATS: list[LineFormat] = [
    megatron.FORMAT,  # Megatron-LM and its forks (Megatron-DeepSpeed)
    torchtitan.FORMAT,
    hf_trainer.FORMAT,
    lightning.FORMAT,
    deepspeed.FORMAT,
    torchrun.FORMAT,
    srun.FORMAT,
    pytorch.FORMAT,  # PyTorch's C++ side: ProcessGroupNCCL, CUDA errors
    nccl.FORMAT,
    mpich.FORMAT,  # HPE Cray MPICH's abort line: a rank's exit, its host and time
    kernel.FORMAT,
]
