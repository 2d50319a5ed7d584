"""The run's settings as its log states them, verbatim: parallelism, batch sizes, sequence
length. Only what a line says outright is taken, under the trainer's own name for it mapped to
one vocabulary (``NAMES``); nothing is computed (a data-parallel size a log does not print is
not derived from the others).

What each trainer prints (one line each, from its source):

- Megatron-LM ``arguments.py`` ``_print_args`` on rank 0, between
  ``------------------------ arguments ------------------------`` and its end line:
  ``  tensor_model_parallel_size ...................... 8`` (name, dots to column 48, value);
  and ``using world size: 64, data-parallel size: 8, context-parallel size: 1, ...,
  tensor-model-parallel size: 8, pipeline-model-parallel size: 1``.
- TorchTitan ``train.py``: ``Training starts at step 1, with local batch size 8, global batch
  size 16, sequence length 2048, total steps 10 (warmup 2)``.
- Hugging Face ``Trainer`` (``***** Running training *****``): ``  Instantaneous batch size per
  device = 8``, ``  Total train batch size (w. parallel, distributed & accumulation) = 64``,
  ``  Gradient Accumulation steps = 1``.
"""

from __future__ import annotations

import re

# setting -> how the run page names it
NAMES: dict[str, str] = {
    "tensor_parallel": "Tensor parallel size",
    "pipeline_parallel": "Pipeline parallel size",
    "data_parallel": "Data parallel size",
    "context_parallel": "Context parallel size",
    "expert_parallel": "Expert parallel size",
    "global_batch": "Global batch size",
    "local_batch": "Local batch size (per data-parallel rank)",
    "micro_batch": "Micro batch size (per GPU)",
    "grad_accumulation": "Gradient accumulation steps",
    "seq_length": "Sequence length",
}
# Megatron-LM's argument names (its arguments block) -> setting
_MEGATRON_ARGS = {
    "tensor_model_parallel_size": "tensor_parallel",
    "pipeline_model_parallel_size": "pipeline_parallel",
    "data_parallel_size": "data_parallel",
    "context_parallel_size": "context_parallel",
    "expert_model_parallel_size": "expert_parallel",
    "global_batch_size": "global_batch",
    "micro_batch_size": "micro_batch",
    "seq_length": "seq_length",
}
_ARG = re.compile(r"^\s*(" + "|".join(_MEGATRON_ARGS) + r") \.+ (\S+)\s*$")
_WORLD_PARTS = {
    "data-parallel size": "data_parallel",
    "context-parallel size": "context_parallel",
    "tensor-model-parallel size": "tensor_parallel",
    "pipeline-model-parallel size": "pipeline_parallel",
}
_WORLD = re.compile(r"(data-parallel size|context-parallel size|tensor-model-parallel size|"
                    r"pipeline-model-parallel size): (\d+)")  # fmt: skip
_TITAN = re.compile(r"Training starts at step \d+, with local batch size (\d+), global batch "
                    r"size (\d+),(?: gradient accumulation steps (\d+),)? sequence length (\d+)")
_HF = {
    "Instantaneous batch size per device": "micro_batch",
    "Total train batch size (w. parallel, distributed & accumulation)": "global_batch",
    "Gradient Accumulation steps": "grad_accumulation",
}
_HF_LINE = re.compile(r"(" + "|".join(re.escape(k) for k in _HF) + r") = ([\d,]+)\s*$")
# Substrings the log prefilter (logline.PREFILTER) lets through for these lines
PREFILTER = (r"_parallel_size \.\.\.|_batch_size \.\.\.|data-parallel size: |"
             r"Instantaneous batch size per device|Total train batch size|"
             r"Gradient Accumulation steps = ")  # fmt: skip


def settings(body: str) -> list[tuple[str, str]]:
    """The settings ``body`` (a log line without its rank prefix) states: [(setting, value as
    written)]; [] for any other line."""
    if " ..." in body and (m := _ARG.match(body)):
        return [(_MEGATRON_ARGS[m[1]], m[2])]
    if "using world size: " in body:
        return [(_WORLD_PARTS[k], v) for k, v in _WORLD.findall(body)]
    if "Training starts at step" in body and (m := _TITAN.search(body)):
        got = [("local_batch", m[1]), ("global_batch", m[2]), ("seq_length", m[4])]
        return got + ([("grad_accumulation", m[3])] if m[3] else [])
    if " = " in body and (m := _HF_LINE.search(body)):
        return [(_HF[m[1]], m[2].replace(",", ""))]
    return []
