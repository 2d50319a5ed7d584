"""The exam's training job (``benchmarks/exam_jobs.py`` starts it under real ``torchrun``).

A tiny model trained with gloo on the CPU. The script itself writes only what a trainer
writes: its progress and checkpoint lines, in one framework's verbatim format
(``exam_formats.py``), and its checkpoints (real DCP trees, as Megatron's ``torch_dist``
format writes them). Every other line of the job's log comes from the real software. At step
``EXAM_AT`` rank ``EXAM_CULPRIT`` does what ``EXAM_KIND`` says; what happened and when, by
this script's own clock, goes to ``EXAM_TRUTH/rank<R>.jsonl`` (never into the log).

Environment: EXAM_KIND, EXAM_CULPRIT, EXAM_AT, EXAM_STEPS, EXAM_SAVE_EVERY, EXAM_STEP_S,
EXAM_FORMAT, EXAM_CKPT, EXAM_TRUTH, EXAM_FR (dump dir), EXAM_PG_TIMEOUT_S, EXAM_ATTEMPT,
EXAM_STRAGGLER_EVERY (NVRx's straggler report every N steps; 0: none).
"""

import ctypes
import json
import os
import signal
import socket
import statistics
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exam_formats  # noqa: E402

ENV = os.environ
KIND, CULPRIT, AT = (
    ENV.get("EXAM_KIND", "none"),
    int(ENV.get("EXAM_CULPRIT", "-1")),
    int(ENV.get("EXAM_AT", "-1")),
)
STEPS, EVERY = int(ENV.get("EXAM_STEPS", "12")), int(ENV.get("EXAM_SAVE_EVERY", "5"))
STEP_S = float(ENV.get("EXAM_STEP_S", "0.3"))
CKPT, TRUTH, FR = Path(ENV["EXAM_CKPT"]), Path(ENV["EXAM_TRUTH"]), ENV.get("EXAM_FR", "")
FMT = exam_formats.FORMATS[ENV.get("EXAM_FORMAT", "megatron")]
REPORT_EVERY = int(ENV.get("EXAM_STRAGGLER_EVERY", "0"))
STRAGGLER_THRESHOLD = 0.7  # NVRx's gpu_relative_perf_threshold default


def truth(rank: int, **ev: object) -> None:
    with open(TRUTH / f"rank{rank}.jsonl", "a") as fh:
        ev |= {"t": time.time(), "rank": rank, "host": socket.gethostname(),
               "attempt": int(ENV.get("EXAM_ATTEMPT", "1")), "pid": os.getpid()}  # fmt: skip
        fh.write(json.dumps(ev) + "\n")


def say(line: str) -> None:
    print(line, flush=True)


def dump_fr(rank: int) -> None:
    """The rank's flight recorder, as PyTorch writes it on a watchdog timeout (pickle,
    ``nccl_trace_rank_N``)."""
    data = torch._C._distributed_c10d._dump_fr_trace(True, True)
    with open(os.path.join(FR, f"nccl_trace_rank_{rank}"), "wb") as fh:
        fh.write(data)


def watch_for_dump(rank: int, store: dist.Store) -> None:
    """As TORCH_NCCL_DUMP_ON_TIMEOUT does: the first rank to time out tells the others
    through the job's store, and each dumps, even one whose main thread is stuck."""

    def loop() -> None:
        while True:
            try:
                if store.check(["exam_dump"]):
                    dump_fr(rank)
                    return
            except Exception:  # the store went away: the job is ending
                return
            time.sleep(0.3)

    threading.Thread(target=loop, daemon=True).start()


def inject(rank: int, world: int, step: int) -> None:
    """The failure, by the real means (a signal, a native crash, an exception...)."""
    truth(rank, ev="fault", kind=KIND, step=step)
    if KIND == "exception":
        raise RuntimeError(f"exam: injected fault in the training step at iteration {step}")
    if KIND == "save_crash":  # the others are in the save's collectives
        raise OSError(f"exam: injected fault while saving the checkpoint of iteration {step}")
    if KIND == "sigkill":  # as the OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)
    if KIND == "oom":  # the kernel's OOM killer itself: a memory cgroup just above what the
        oom_killed()  # rank holds, then more (it logs "Memory cgroup out of memory: Killed ...")
    if KIND == "segfault":  # a real native crash: read address 0
        ctypes.string_at(0)
    if KIND == "abort":
        os.abort()
    if KIND == "exit0":  # a rank whose loop ends early, cleanly
        sys.exit(0)
    if KIND == "hang":  # stuck before the next collective (a data loader, a hung kernel)
        while True:
            time.sleep(1)
    if KIND == "node_lost":  # every rank of this agent and the agent itself, at once
        agent = os.getppid()
        kids = []
        for task in Path(f"/proc/{agent}/task").iterdir():
            kids += (task / "children").read_text().split()
        os.kill(agent, signal.SIGKILL)
        for pid in kids:
            if int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def straggler_report(rank: int, world: int, compute_s: list[float]) -> None:
    """NVRx's straggler detection as a job uses it (``straggler.Detector``: each rank times
    its compute section; a report gathers every rank's median over the interval, and a rank's
    relative score is the fastest rank's median over its own); rank 0 logs it. Measured here:
    a rank's time from its step's start to its all-reduce (its own work, not the wait)."""
    got: list = [None] * world
    dist.all_gather_object(got, (statistics.median(compute_s), socket.gethostname()))
    if rank != 0:
        return
    best = min(m for m, _ in got)
    scores = {r: best / m for r, (m, _) in enumerate(got)}
    nodes = {r: h for r, (_, h) in enumerate(got)}
    for line in exam_formats.straggler_report(scores, nodes, STRAGGLER_THRESHOLD, datetime.now()):
        say(line)


MEMCG = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller, as on this machine


def oom_killed() -> None:
    """Be killed by the kernel's OOM killer, for real: this rank alone in a memory cgroup
    limited to 64 MiB over its resident memory, then 1 GiB written (no swap here)."""
    cg = MEMCG / f"exam-oom-{os.getpid()}"
    cg.mkdir()
    rss_kb = next(int(ln.split()[1]) for ln in Path("/proc/self/status").read_text().splitlines()
                  if ln.startswith("VmRSS:"))  # fmt: skip
    (cg / "memory.limit_in_bytes").write_text(str((rss_kb << 10) + (64 << 20)))
    (cg / "cgroup.procs").write_text(str(os.getpid()))
    hog = bytearray(b"\x01") * (1 << 30)
    raise RuntimeError(f"exam: the OOM killer spared {len(hog)} bytes over the limit")


def latest() -> int:
    """The step the job resumes from, as each framework finds it: Megatron's tracker file,
    DeepSpeed's ``latest``, TorchTitan's newest ``step-N`` with DCP's ``.metadata``."""
    if FMT.layout == "megatron":
        f = CKPT / "latest_checkpointed_iteration.txt"
        return int(f.read_text()) if f.exists() else 0
    if FMT.layout == "deepspeed":
        f = CKPT / "latest"
        return int(f.read_text().strip()[len("global_step") :]) if f.exists() else 0
    if FMT.layout == "hf":  # the Trainer's newest checkpoint-N with its trainer_state.json
        done = [p for p in CKPT.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
        return max((int(p.name[11:]) for p in done), default=0)
    if FMT.layout == "lightning":  # the newest epoch=E-step=S.ckpt ModelCheckpoint kept
        return max((int(p.stem.rsplit("=", 1)[1]) for p in CKPT.glob("epoch=*-step=*.ckpt")),
                   default=0)
    done = [p for p in CKPT.glob("step-*") if (p / ".metadata").exists()]
    return max((int(p.name[5:]) for p in done), default=0)


# Lightning's TQDMProgressBar.BAR_FORMAT
PL_BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"
DEEPSPEED = ("deepspeed", "hf")  # DeepSpeed's files: alone, or in the Trainer's checkpoint-N


def _ds_root(step: int) -> Path:
    return CKPT / f"checkpoint-{step}" if FMT.layout == "hf" else CKPT


def _dir(step: int) -> Path:
    name = {"megatron": f"iter_{step:07d}", "titan": f"step-{step}"}.get(FMT.layout)
    return CKPT / name if name else _ds_root(step) / f"global_step{step}"


def write_ckpt(rank: int, step: int, state: dict) -> None:
    """DCP for Megatron's torch_dist and TorchTitan; DeepSpeed's per-rank files; Lightning's
    one file from rank 0 (DDP: every rank holds the same state)."""
    if FMT.layout == "lightning":
        if rank == 0:
            tmp = CKPT / f".epoch=0-step={step}.ckpt.part"
            torch.save({"state_dict": state, "global_step": step, "epoch": 0}, tmp)
            tmp.rename(CKPT / f"epoch=0-step={step}.ckpt")
        dist.barrier()
        return
    d = _dir(step)
    if FMT.layout not in DEEPSPEED:
        dcp.save(state, checkpoint_id=str(d))
    else:
        d.mkdir(parents=True, exist_ok=True)
        torch.save(state, d / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
        if rank == 0:
            torch.save(state, d / "mp_rank_00_model_states.pt")
    dist.barrier()
    if rank == 0 and FMT.layout == "megatron":
        (CKPT / "latest_checkpointed_iteration.txt").write_text(str(step))
    if rank == 0 and FMT.layout in DEEPSPEED:
        (_ds_root(step) / "latest").write_text(f"global_step{step}")
    if rank == 0 and FMT.layout == "hf":
        state_json = {"global_step": step, "max_steps": STEPS, "epoch": step / STEPS}
        (_ds_root(step) / "trainer_state.json").write_text(json.dumps(state_json, indent=2))


def read_ckpt(rank: int, step: int, state: dict) -> None:
    if FMT.layout == "lightning":
        state.update(torch.load(CKPT / f"epoch=0-step={step}.ckpt")["state_dict"])
        return
    d = _dir(step)
    if FMT.layout not in DEEPSPEED:
        dcp.load(state, checkpoint_id=str(d))
    else:
        state.update(torch.load(d / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"))


def save(rank: int, world: int, step: int, state: dict, printer: bool) -> None:
    if printer:
        for line in FMT.save_start(step, str(CKPT)):
            say(line)
    if KIND == "save_crash" and step == AT and rank == CULPRIT:
        inject(rank, world, step)  # mid-save: the others are in the save's collectives
    write_ckpt(rank, step, state)
    if rank == 0:
        truth(rank, ev="saved", step=step)
    if printer:
        for line in FMT.save_end(step, str(CKPT)):
            say(line)


def main() -> None:
    # ranks of a loaded machine reach the first collective minutes apart: a long timeout for
    # the job; the hang's waiting ranks time out on a group of their own (EXAM_PG_TIMEOUT_S)
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    group = None
    if KIND == "hang":
        wait_s = float(ENV.get("EXAM_PG_TIMEOUT_S", "20"))
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    # Megatron's training_log is print_rank_last; the Trainer logs on the world's process zero
    printer = FMT.all_ranks or rank == (0 if FMT.layout in ("hf", "lightning") else world - 1)
    bar = None
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    if KIND == "hang" and FR:
        watch_for_dump(rank, dist.distributed_c10d._get_default_store())
    start = latest()
    if printer:
        for line in FMT.preamble(world):
            say(line)
    if start:
        if printer:
            for line in FMT.load_start(start, str(CKPT)):
                say(line)
        read_ckpt(rank, start, state)
        model.load_state_dict(state["model"])
        if printer:
            for line in FMT.load_end(start, str(CKPT)):
                say(line)
        if rank == 0:
            truth(rank, ev="loaded", step=start)
    if printer:
        for line in FMT.start(world, STEPS) + (FMT.resumed(start, str(CKPT)) if start else []):
            say(line)
        if FMT.layout == "hf":  # the Trainer's own tqdm bar (ProgressCallback), on stderr
            from tqdm.auto import tqdm

            bar = tqdm(total=STEPS, dynamic_ncols=True)  # from 0 even when resumed, as there
        if FMT.layout == "lightning":  # TQDMProgressBar's training bar, on stdout
            from tqdm import tqdm

            bar = tqdm(desc="Epoch 0", total=STEPS, leave=True, dynamic_ncols=True,
                       file=sys.stdout, smoothing=0, bar_format=PL_BAR)
    t_last = time.time()
    compute_s: list[float] = []
    for step in range(start + 1, STEPS + 1):
        if step == AT and rank == CULPRIT and KIND not in ("none", "slow", "save_crash"):
            inject(rank, world, step - 1)
        t_step = time.monotonic()
        slow = KIND == "slow" and rank == CULPRIT and step >= AT
        if slow and step == AT:  # when it slowed, by the job's own clock (the live clock)
            truth(rank, ev="fault", kind=KIND, step=step)
        time.sleep(STEP_S * (4 if slow else 1))
        x = torch.randn(32, 64)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        compute_s.append(time.monotonic() - t_step)
        for p in model.parameters():
            try:
                dist.all_reduce(p.grad, group=group)
            except Exception:
                if KIND == "hang" and FR:
                    dist.distributed_c10d._get_default_store().set("exam_dump", "1")
                    dump_fr(rank)
                    time.sleep(3)  # the stuck rank's watcher dumps before torchrun stops it
                raise
            p.grad /= world
        opt.step()
        now = time.time()
        line = FMT.progress(step, STEPS, world, loss.item(), now - t_last)
        if FMT.layout == "lightning":  # on_train_batch_end: n = batch_idx + 1, refreshed
            line = ""
            if bar is not None:  # get_metrics: the logger's version first, then the metrics
                bar.n = step
                bar.set_postfix({"v_num": int(ENV.get("EXAM_ATTEMPT", "1")) - 1,
                                 "train_loss": f"{loss.item():.3f}"})
        elif bar is not None:  # ProgressCallback: the bar moves, the log dict is written above it
            bar.update(step - bar.n)  # on_step_end: global_step - current_step
            bar.write(line)
        elif printer:
            say(line)
        if printer and line:  # what it printed: a line the launcher never relays is not in it
            truth(rank, ev="printed", step=step, line=line)
        if rank == world - 1:  # the truth is kept by one rank, whichever prints
            truth(rank, ev="progress", step=step)
        t_last = now
        if REPORT_EVERY and step % REPORT_EVERY == 0:
            straggler_report(rank, world, compute_s)
            compute_s = []
        if step % EVERY == 0:
            state["step"] = torch.tensor(step)
            save(rank, world, step, state, printer)
    if printer:
        for line in FMT.end(STEPS):
            say(line)
    if rank == world - 1:
        truth(rank, ev="finished", step=STEPS)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
