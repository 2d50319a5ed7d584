"""The progress and checkpoint lines each framework prints, verbatim, for the exam's job
(``exam_train.py``). Only these lines are written by the exam; everything else in its logs
comes from the real software.

Sources (the format strings copied from each):
- Megatron-LM (checkpoints: DCP ``iter_NNNNNNN/`` and ``latest_checkpointed_iteration.txt``,
  its ``torch_dist`` format): megatron/training/training.py ``training_log`` (`` [%Y-%m-%d %H:%M:%S]
  iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} |
  learning rate: {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} |
  grad norm: {:.3f} | number of skipped iterations: {:3d} | number of nan iterations: {:3d} |``),
  ``print_datetime('after training is done')``; megatron/training/checkpointing.py
  (``saving checkpoint at iteration {:7d} to {} in {} format``, ``  successfully saved
  checkpoint from iteration {:7d} to {} [ t {}/{}, p {}/{} ]``, `` loading distributed
  checkpoint from {} at iteration {}``, ``  successfully loaded checkpoint from {} [ t {}/{},
  p {}/{} ] at iteration {}``); megatron/training/arguments.py (``using world size: {},
  data-parallel size: {}, ...``).
- TorchTitan (DCP ``step-N/``; every rank logs, torchrun ``--role rank --tee 3`` as its
  run_train.sh): torchtitan/tools/logging.py (``[titan] %(asctime)s - %(name)s -
  %(levelname)s - %(message)s``), torchtitan/components/metrics.py (``step: {step:2}  loss:
  {loss:7.4f}  grad_norm: {grad_norm:7.4f}  memory: {:5.2f}GiB({:.2f}%)  tps: {round(tps):,}
  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%``), torchtitan/train.py (``Training starts at step
  {}, with local batch size {}, global batch size {}, sequence length {}, total steps {}
  (warmup {})``), torchtitan/components/checkpoint.py (``Saving the checkpoint (or staging if
  async is enabled).``, ``Finished saving the checkpoint (or staging if async is enabled)in
  {:.2f} seconds.``, ``Loading the checkpoint from {}.``, ``Finished loading the checkpoint in
  {:.2f} seconds.``).
- Megatron-DeepSpeed (DeepSpeed's ``global_stepN/`` files and ``latest``): its
  megatron/training.py ``training_log`` (no time of its own; ``consumed tokens``, ``samples
  per second``, ``TFLOPs`` added), megatron/checkpointing.py (``saving checkpoint at iteration
  {:7d} to {}``, ``  successfully saved checkpoint at iteration {:7d} to {}``,
  ``  successfully loaded checkpoint from {} at iteration {}``) and DeepSpeed's logger
  (deepspeed/utils/logging.py: ``[%(asctime)s] [%(levelname)s]
  [%(filename)s:%(lineno)d:%(funcName)s] %(message)s``; engine.py ``[Rank 0] Saving model
  checkpoint: {}``, ``Checkpoint {tag} is about to be saved!``, ``Checkpoint {tag} is ready
  now!``).
- Hugging Face Trainer with DeepSpeed (``checkpoint-N/`` holding ``trainer_state.json``,
  ``latest`` and DeepSpeed's ``global_stepN/``): transformers' explicit log format
  (utils/logging.py ``enable_explicit_format``: ``[%(levelname)s|%(filename)s:%(lineno)s]
  %(asctime)s >> %(message)s``, as its example scripts set it), trainer.py (``***** Running
  training *****``, ``  Num examples = {num_examples:,}``, ..., ``  Total optimization steps =
  {max_steps:,}``, ``Saving model checkpoint to {output_dir}``, after that block on a resume
  ``  Continuing training from checkpoint, will skip to saved global_step``, ``  Continuing
  training from epoch {}``, ``  Continuing training from global step {}``, ``  Will skip the
  first {} epochs then the first {} batches in the first epoch.``, ``Training completed. Do not
  forget to share your model on huggingface.co/models =)``), integrations/deepspeed.py
  ``deepspeed_load_checkpoint`` (``Attempting to resume from {checkpoint_path}``, before the
  block), the log dicts ProgressCallback writes above its tqdm bar (``str(logs)``; the bar
  starts at 0 on a resume and jumps by ``global_step - current_step``), DeepSpeed's lines as
  above and its torch_checkpoint_engine.py (``[Torch] Loading checkpoint from {}...``,
  ``[Torch] Loaded checkpoint from {}.``, a pair per file read).
- PyTorch Lightning 2.x (``ModelCheckpoint(monitor="step", mode="max", every_n_train_steps=N,
  verbose=True)``, one ``epoch=E-step=S.ckpt`` file saved by rank 0) under Hydra, whose job
  logging format (hydra/conf/hydra/job_logging/default.yaml: ``[%(asctime)s][%(name)s]
  [%(levelname)s] - %(message)s``, no space between the brackets) Lightning's rank-zero
  messages propagate to: lightning/pytorch/trainer/setup.py (``GPU available: {}, used: {}``,
  ``TPU available: {}, using: {} TPU cores``), lightning/fabric/utilities/distributed.py (the
  ``distributed_backend=...`` / ``All distributed processes registered. Starting with {}
  processes`` banner between lines of 100 dashes), trainer/connectors/checkpoint_connector.py
  (``Restoring states from the checkpoint path at {}``, ``Restored all states from the
  checkpoint at {}``), callbacks/model_checkpoint.py (``Epoch {epoch:d}, global step {step:d}:
  {monitor!r} reached {current:0.5f} (best {best:0.5f}), saving model to {filepath!r} as top
  {k}``), loops/fit_loop.py (```Trainer.fit` stopped: `max_steps={}` reached.``) and
  callbacks/progress/tqdm_progress.py (the training bar on stdout: ``Epoch {epoch}`` as its
  description, ``BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining},
  {rate_noinv_fmt}{postfix}]"``, set to ``batch_idx + 1`` and refreshed after each batch, the
  metrics as its postfix, restarted at 0 on a resume).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

GBS = 32  # global batch size the job states


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Format:
    layout: str  # the checkpoint tree: megatron, titan or deepspeed (exam_train.py)
    all_ranks: bool  # every rank prints (TorchTitan), else the last rank (Megatron)
    start: Callable[[int, int], list[str]]  # (world, steps)
    progress: Callable[[int, int, int, float, float], str]  # (step, steps, world, loss, dt_s)
    save_start: Callable[[int, str], list[str]]  # (step, dir)
    save_end: Callable[[int, str], list[str]]
    load_start: Callable[[int, str], list[str]]
    load_end: Callable[[int, str], list[str]]
    end: Callable[[int], list[str]]
    # after ``start`` on a resumed launch (the HF Trainer says where it continues from there)
    resumed: Callable[[int, str], list[str]] = lambda step, d: []
    # before any checkpoint is loaded (Lightning sets the job up first)
    preamble: Callable[[int], list[str]] = lambda world: []


def _meg_tail(loss: float) -> str:
    """The fields after the learning rate, the same in Megatron-LM and Megatron-DeepSpeed."""
    return (
        f" global batch size: {GBS:5d} | lm loss: {loss:.6E} | loss scale: {1.0:.1f} |"
        f" grad norm: {1.0:.3f} | number of skipped iterations: {0:3d} |"
        f" number of nan iterations: {0:3d} |"
    )


def _meg_progress(step: int, steps: int, world: int, loss: float, dt: float) -> str:
    return (
        f" [{_now()}] iteration {step:8d}/{steps:8d} | consumed samples: {step * GBS:12d} |"
        f" elapsed time per iteration (ms): {dt * 1000.0:.1f} | learning rate: {0.01:.6E} |"
        + _meg_tail(loss)
    )


MEGATRON = Format(
    layout="megatron",
    all_ranks=False,
    start=lambda world, steps: [
        f"using world size: {world}, data-parallel size: {world}, context-parallel size: 1, "
        "tensor-model-parallel size: 1, pipeline-model-parallel size: 1"
    ],
    progress=_meg_progress,
    save_start=lambda step, d: [
        "saving checkpoint at iteration {:7d} to {} in {} format".format(step, d, "torch_dist")
    ],
    save_end=lambda step, d: [
        f"  successfully saved checkpoint from iteration {step:7d} to {d} [ t {1}/{1}, p {1}/{1} ]"
    ],
    load_start=lambda step, d: [f" loading distributed checkpoint from {d} at iteration {step}"],
    load_end=lambda step, d: [
        f"  successfully loaded checkpoint from {d} [ t 1/1, p 1/1 ] at iteration {step}"
    ],
    end=lambda steps: [f"[after training is done] datetime: {_now()} "],
)


def _titan(msg: str) -> str:
    now = datetime.now()
    return f"[titan] {now:%Y-%m-%d %H:%M:%S},{now.microsecond // 1000:03d} - root - INFO - {msg}"


TITAN = Format(
    layout="titan",
    all_ranks=True,
    start=lambda world, steps: [_titan(
        f"Training starts at step 1, with local batch size 8, global batch size {8 * world}, "
        f"sequence length 2048, total steps {steps} (warmup 2)")],
    progress=lambda step, steps, world, loss, dt: _titan(
        f"step: {step:2}  loss: {loss:7.4f}  grad_norm: {1.0:7.4f}  memory: {0.5:5.2f}GiB"
        f"({1.25:.2f}%)  tps: {round(8 * 2048 / dt):,}  tflops: {0.01:,.2f}  mfu: {0.01:.2f}%"),
    save_start=lambda step, d: [_titan("Saving the checkpoint (or staging if async is enabled).")],
    save_end=lambda step, d: [_titan("Finished saving the checkpoint (or staging if async is "
                                     f"enabled)in {0.21:.2f} seconds.")],
    load_start=lambda step, d: [_titan(f"Loading the checkpoint from {d}/step-{step}.")],
    load_end=lambda step, d: [_titan(f"Finished loading the checkpoint in {0.05:.2f} seconds.")],
    end=lambda steps: [_titan("Training completed")],
)  # fmt: skip


def _ds(msg: str, where: str = "logging.py:128:log_dist") -> str:
    now = datetime.now()
    return f"[{now:%Y-%m-%d %H:%M:%S},{now.microsecond // 1000:03d}] [INFO] [{where}] {msg}"


def _mds_progress(step: int, steps: int, world: int, loss: float, dt: float) -> str:
    return (
        f" iteration {step:8d}/{steps:8d} | consumed samples: {step * GBS:12d} |"
        f" consumed tokens: {step * GBS * 2048:12d} |"
        f" elapsed time per iteration (ms): {dt * 1000.0:.1f} | learning rate: {0.01:.3E} |"
        + _meg_tail(loss)
        + f" samples per second: {GBS / dt:.3f} |"
        f" tokens per gpu per second (tgs): {GBS * 2048 / dt / world:.3f} | TFLOPs: {0.01:.2f} |"
    )


MEGATRON_DEEPSPEED = Format(
    layout="deepspeed",
    all_ranks=False,
    start=lambda world, steps: [f"using world size: {world}, data-parallel-size: {world}, "
                                "sequence-parallel size: 1, tensor-model-parallel size: 1, "
                                "pipeline-model-parallel size: 1 "],
    progress=_mds_progress,
    save_start=lambda step, d: [
        f"saving checkpoint at iteration {step:7d} to {d}",
        _ds(f"[Rank 0] Saving model checkpoint: {d}/global_step{step}/mp_rank_00_model_states.pt",
            "engine.py:3241:_save_checkpoint"),
        _ds(f"Checkpoint global_step{step} is about to be saved!",
            "engine.py:3135:save_checkpoint"),
    ],
    save_end=lambda step, d: [
        _ds(f"Checkpoint global_step{step} is ready now!", "engine.py:3206:save_checkpoint"),
        f"  successfully saved checkpoint at iteration {step:7d} to {d}",
    ],
    load_start=lambda step, d: [_ds(
        f"[Rank 0] Loading checkpoint: {d}/global_step{step}/mp_rank_00_model_states.pt",
        "torch_checkpoint_engine.py:27:load")],
    load_end=lambda step, d: [f"  successfully loaded checkpoint from {d} at iteration {step}"],
    end=lambda steps: [f"[after training is done] datetime: {_now()} "],
)  # fmt: skip


def _hf(msg: str, line: int, where: str = "trainer.py") -> str:
    now = datetime.now()
    ms = now.microsecond // 1000
    return f"[INFO|{where}:{line}] {now:%Y-%m-%d %H:%M:%S},{ms:03d} >> {msg}"


def _ds_load(path: str) -> list[str]:
    """DeepSpeed's torch_checkpoint_engine.py ``load``: one pair per file it reads."""
    return [_ds(f"[Torch] Loading checkpoint from {path}...", "torch_checkpoint_engine.py:27:load"),
            _ds(f"[Torch] Loaded checkpoint from {path}.", "torch_checkpoint_engine.py:29:load")]


HF_DEEPSPEED = Format(
    layout="hf",
    all_ranks=False,
    start=lambda world, steps: [
        _hf("***** Running training *****", 2414),
        _hf(f"  Num examples = {steps * GBS:,}", 2415),
        _hf("  Num Epochs = 1", 2416),
        _hf(f"  Instantaneous batch size per device = {GBS // world:,}", 2417),
        _hf(f"  Total train batch size (w. parallel, distributed & accumulation) = {GBS:,}", 2420),
        _hf("  Gradient Accumulation steps = 1", 2421),
        _hf(f"  Total optimization steps = {steps:,}", 2422),
        _hf(f"  Number of trainable parameters = {64 * 64 + 64:,}", 2423),
    ],
    progress=lambda step, steps, world, loss, dt: str(
        {"loss": round(loss, 4), "grad_norm": 1.0, "learning_rate": 0.01,
         "epoch": round(step / steps, 2)}),
    save_start=lambda step, d: [
        _hf(f"Saving model checkpoint to {d}/checkpoint-{step}", 3984),
        _ds(f"[Rank 0] Saving model checkpoint: {d}/checkpoint-{step}/global_step{step}/"
            "mp_rank_00_model_states.pt", "engine.py:3241:_save_checkpoint"),
        _ds(f"Checkpoint global_step{step} is about to be saved!",
            "engine.py:3135:save_checkpoint"),
    ],
    save_end=lambda step, d: [
        _ds(f"Checkpoint global_step{step} is ready now!", "engine.py:3206:save_checkpoint"),
    ],
    load_start=lambda step, d: [
        _hf(f"Attempting to resume from {d}/checkpoint-{step}", 402, "deepspeed.py"),
        *_ds_load(f"{d}/checkpoint-{step}/global_step{step}/mp_rank_00_model_states.pt"),
        *_ds_load(f"{d}/checkpoint-{step}/global_step{step}/"
                  "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    ],
    load_end=lambda step, d: [],
    resumed=lambda step, d: [
        _hf("  Continuing training from checkpoint, will skip to saved global_step", 2462),
        _hf("  Continuing training from epoch 0", 2463),
        _hf(f"  Continuing training from global step {step}", 2464),
        _hf(f"  Will skip the first 0 epochs then the first {step} batches in the first "
            "epoch.", 2466),
    ],
    end=lambda steps: [
        _hf("\n\nTraining completed. Do not forget to share your model on huggingface.co/models "
            "=)\n\n", 2713),
    ],
)  # fmt: skip

def _pl(msg: str, name: str = "lightning.pytorch.utilities.rank_zero") -> str:
    now = datetime.now()
    return f"[{now:%Y-%m-%d %H:%M:%S},{now.microsecond // 1000:03d}][{name}][INFO] - {msg}"


def _pl_ckpt(d: str, step: int) -> str:
    return f"{d}/epoch=0-step={step}.ckpt"  # ModelCheckpoint's default name, one epoch


_BANNER = "-" * 100
LIGHTNING = Format(
    layout="lightning",
    all_ranks=False,
    preamble=lambda world: [
        _pl("GPU available: False, used: False"),
        _pl("TPU available: False, using: 0 TPU cores"),
        _pl(f"{_BANNER}\ndistributed_backend=gloo\nAll distributed processes registered. "
            f"Starting with {world} processes\n{_BANNER}\n",
            "lightning.fabric.utilities.rank_zero"),
    ],
    start=lambda world, steps: [],
    progress=lambda step, steps, world, loss, dt: "",  # the bar's (exam_train.py)
    save_start=lambda step, d: [_pl(
        f"Epoch 0, global step {step}: 'step' reached {float(step):0.5f} (best "
        f"{float(step):0.5f}), saving model to {_pl_ckpt(d, step)!r} as top 1")],
    save_end=lambda step, d: [],
    load_start=lambda step, d: [
        _pl(f"Restoring states from the checkpoint path at {_pl_ckpt(d, step)}")],
    load_end=lambda step, d: [
        _pl(f"Restored all states from the checkpoint at {_pl_ckpt(d, step)}")],
    end=lambda steps: [_pl(f"`Trainer.fit` stopped: `max_steps={steps}` reached.")],
)  # fmt: skip

FORMATS: dict[str, Format] = {
    "megatron": MEGATRON,
    "titan": TITAN,
    "megatron_deepspeed": MEGATRON_DEEPSPEED,
    "hf": HF_DEEPSPEED,
    "lightning": LIGHTNING,
}


def straggler_report(scores: dict[int, float], nodes: dict[int, str], threshold: float,
                     when: datetime) -> list[str]:  # fmt: skip
    """NVIDIA Resiliency Extension's straggler report as its callback logs it
    (``nvidia_resiliency_ext/ptl_resiliency/straggler_det_callback.py``:
    ``_print_gpu_scores`` logs ``f"\\nGPU relative performance:\\n{rel_perf_str}"``, where
    ``_format_gpu_scores`` lists every rank, worst first, as ``f"  Rank={r} Node={node}
    Score={s:.2f}"`` when there are at most 3 + 3 of them; ``_log_stragglers`` warns
    ``f"STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks:
    {rel_stragglers}"``, a set of ``StragglerId(rank=, node=)``, for the ranks whose score is
    below ``gpu_relative_perf_threshold``), through TorchTitan's logger format."""
    head = f"[titan] {when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - root - "
    ranked = sorted(((s, r) for r, s in scores.items()), reverse=True)
    out = [head + "INFO - ", "GPU relative performance:"]
    out += [f"  Rank={r} Node={nodes[r]} Score={s:.2f}" for s, r in reversed(ranked)]
    slow = [r for s, r in ranked if s < threshold]
    if slow:
        ids = ", ".join(f"StragglerId(rank={r}, node='{nodes[r]}')" for r in slow)
        out.append(head + "WARNING - STRAGGLER DETECTION WARNING: Some GPUs have worse "
                   f"relative performance. Affected ranks: {{{ids}}}")  # fmt: skip
    return out
