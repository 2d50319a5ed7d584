"""Checkpoint directories on a storage tier as checkpoint rows: which step was written, where,
how many bytes, when, and whether the write completed.

Long module: four writer formats share one walk, one completion rule and one watcher.

Why from directories: every trainer already leaves its checkpoints on disk, and the files alone
tell the Checkpoints page what it needs, with nothing posted by the job. Each writer creates one
file (or rename) last, after every shard is down; that completion marker is what separates a
checkpoint from the remains of a write that died with the job:

* PyTorch DCP (``dcp``): a step directory (``step-100``, ``step_100``, ``global_step100``)
  holding ``*.distcp`` shards. ``FileSystemWriter.finish`` writes ``.metadata`` (through
  ``.metadata.tmp`` and a rename) after every rank's shards: complete when ``.metadata`` exists.
* Megatron-LM (``megatron``): ``iter_0000100/`` directories (``mp_rank_XX/model_optim_rng.pt``
  or torch_dist shards) beside ``latest_checkpointed_iteration.txt``, which Megatron rewrites
  after a save completes: an iteration at or below the tracked one is complete, one above it is
  not. Without a usable tracker (missing, garbage, or ``release``) an iteration is complete only
  when it holds a torch_dist ``.metadata``.
* Hugging Face Trainer (``hf``): ``checkpoint-500/``, complete when ``trainer_state.json``
  exists (the Trainer writes it after the model, optimizer, scheduler and RNG state). A
  ``tmp-checkpoint-500/`` (the name some versions save under before renaming) is never complete.
* DeepSpeed (``deepspeed``): ``global_step1000/`` directories (``mp_rank_00_model_states.pt``,
  ``*_optim_states.pt``) beside a ``latest`` file naming the newest complete tag
  (``global_step1000``), which rank 0 writes after the save: that step is complete, one above
  it (a save that died, or that ``latest`` never pointed to) is not, and one below it only when
  its files are whole and hold every rank's optimizer states (``_ds_whole``). Without ``latest``
  the files cannot tell: whole once unchanged for the grace period. Inside a Hugging Face
  ``checkpoint-500/`` (the Trainer with DeepSpeed) the same ``latest`` must name its
  ``global_step`` directory for the checkpoint to be complete.
* Plain files (``file``): ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.safetensors`` with the step in the
  name (``model_step_1200.pt``, ``ckpt-1200.safetensors``, ``iter_1200.pt``,
  ``epoch=3-step=1200.ckpt``). No marker exists, so the file's own format says whether it is
  whole: torch.save's zip ends with an end-of-central-directory record, and a safetensors header
  gives the length of the data after it. A file in neither format (a legacy pickle) cannot be
  checked; it counts as whole once unchanged for the grace period (``counts['unverified']``).

Status: ``ok`` when complete. An incomplete checkpoint whose newest file is older than the grace
period (default 10 min) is ``failed``, never ``ok``; a younger one is still being written and is
reported in ``in_progress``, not as a row.

Times come from file modification times, as naive UTC. ``start_ts`` is the earliest mtime among
the checkpoint's files: an mtime is when a file was last written, so the real start is earlier
and ``write_s`` (end minus start) is a lower bound. A checkpoint with one file has one time only:
``start_ts == end_ts`` and ``write_s`` is None (unknown), not zero. ``end_ts`` is the completion
marker's mtime (the newest file when something was written after it; for Megatron's tracked
iteration, the tracker's mtime).

Layout: the root may be the run's checkpoint directory or a parent holding several runs'. The
run is ``run`` when given, else the first directory below the root that is not a generic name
like ``checkpoints``, else the root's own name. Symlinked directories are followed when they lead
outside the root (a link inside it is an alias of something scanned anyway); a link back into a
directory already on the path is a loop, reported and not followed.

Speed: ``os.scandir`` with one ``stat`` per file, and ``CheckpointWatcher`` does not enter a
checkpoint it has already emitted as ``ok``, so a steady poll costs a directory listing per
container rather than a stat per shard.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from telemetry.errors import FactoryFloorError
from telemetry.vocabulary import TIERS

DEFAULT_GRACE_S = 600.0
MAX_DEPTH = 8  # directories below the root; deeper ones are counted, not scanned
TRACKER = "latest_checkpointed_iteration.txt"
FORMATS = ("dcp", "megatron", "hf", "deepspeed", "file")
DS_LATEST = "latest"  # DeepSpeed's tracker: the tag of the newest complete save
COLUMNS = (
    "run_id", "step", "tier", "start_ts", "end_ts", "bytes", "write_s", "blocking_s", "status",
    "path", "format",
)  # fmt: skip

_MEGATRON_DIR = re.compile(r"iter_(?P<step>\d+)")
_DIRS = (  # directory name -> format; a step directory is DCP only if it holds DCP files
    ("megatron", _MEGATRON_DIR),
    ("hf", re.compile(r"(?:tmp-)?checkpoint-(?P<step>\d+)")),
    ("dcp", re.compile(r"(?:global_)?step[-_]?(?P<step>\d+)")),
)
_DCP_FILES = (".distcp", ".metadata", ".metadata.tmp")
_DS_DIR = re.compile(r"global_step(?P<step>\d+)")
_DS_FILES = ("model_states.pt", "optim_states.pt")
_FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
_FILE_STEP = re.compile(r"(?<![a-z])(step|iteration|iter|ckpt|checkpoint)[-_=]?(\d+)(?!\d)", re.I)
# Folder names that say "checkpoints" rather than name a run.
_GENERIC = {"checkpoint", "checkpoints", "ckpt", "ckpts", "save", "saves", "output", "outputs"}
_EPOCH = datetime(1970, 1, 1)
_EOCD = b"PK\x05\x06"  # zip end of central directory
_MAX_SAFETENSORS_HEADER = 100_000_000  # the format's own limit
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)}


class UnknownTierError(FactoryFloorError, ValueError):
    def __init__(self, tier: str) -> None:
        super().__init__(f"unknown checkpoint tier {tier!r}; tiers are {', '.join(TIERS)}")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint found on a tier; ``row()`` is its ``checkpoints`` table row."""

    run: str | None
    step: int
    tier: str
    path: str
    format: str
    bytes: int
    files: int
    start_ts: datetime
    end_ts: datetime
    write_s: float | None
    status: str  # ok, failed, in_progress

    @property
    def key(self) -> tuple[str | None, int, str, str, str]:
        return (self.run, self.step, self.tier, self.path, self.status)

    def row(self) -> dict[str, Any]:
        return {
            "run_id": self.run, "step": self.step, "tier": self.tier, "start_ts": self.start_ts,
            "end_ts": self.end_ts, "bytes": self.bytes, "write_s": self.write_s,
            "blocking_s": None, "status": self.status, "path": self.path, "format": self.format,
        }  # fmt: skip


@dataclass
class ScanResult:
    """``checkpoints`` holds the rows (ok and failed), ``in_progress`` the writes still inside
    the grace period; ``problems`` one line each; ``counts`` what was seen (``dirs``, ``files``
    of checkpoints, ``other_files``, ``unrecognised`` checkpoint-like files without a step,
    ``ok``/``failed``/``in_progress``, one count per format, ``unverified``, ``settled``)."""

    tier: str
    root: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    in_progress: list[Checkpoint] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        return [c.row() for c in self.checkpoints]


def frame(checkpoints: Iterable[Checkpoint]) -> pd.DataFrame:
    """Checkpoints as a DataFrame in the ``checkpoints`` table's column order (``COLUMNS``)."""
    return pd.DataFrame([c.row() for c in checkpoints], columns=list(COLUMNS))


def scan(
    tier: str,
    root: str | os.PathLike[str],
    *,
    run: str | None = None,
    now: datetime | None = None,
    grace_s: float = DEFAULT_GRACE_S,
) -> ScanResult:
    """Scan ``root`` on ``tier`` once. ``now`` (naive UTC, default the clock) ages incomplete
    checkpoints against ``grace_s``. Never raises for what is on disk: a missing, unreadable or
    odd root or entry becomes a line in ``problems``. Raises ``UnknownTierError`` for a bad tier."""
    _check(tier, grace_s)
    return _Scan(tier, root, run, grace_s, frozenset()).scan(now)


class CheckpointWatcher:
    """Polls one tier's root and hands back each checkpoint once, when it is settled.

    ``poll(now)`` returns the checkpoints to append: one that became ``ok``, or that was seen
    ``failed`` on two consecutive polls with the same files, bytes and times (a checkpoint being
    deleted by rotation loses its marker before its shards and must not pass for a failed
    write). Nothing is re-emitted and deletions are never emitted, so ``history`` (everything
    this watcher emitted) keeps a checkpoint that rotation later removed.

    A ``failed`` checkpoint whose marker appears later (a slow write that stalled past the grace
    period, or a restarted job saving the same step into the same directory) is emitted once more
    as ``ok``: the same run, step, tier and path with status ``ok``. Its identity is therefore
    ``(run, step, tier, path, status)``.

    Restart: pass what the store already holds as ``stored``, tuples ``(run, step, tier, path,
    status)``; a 4-tuple without status counts as settled ``ok``. A stored ``ok`` path is never
    emitted again (and never re-read); a stored ``failed`` one is still watched for a late
    completion. Rows of other tiers are ignored.
    """

    def __init__(
        self,
        tier: str,
        root: str | os.PathLike[str],
        run: str | None = None,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        stored: Iterable[tuple[Any, ...]] = (),
    ) -> None:
        _check(tier, grace_s)
        self.tier, self.root, self.run, self.grace_s = tier, root, run, grace_s
        self._ok: set[str] = set()  # paths emitted (or stored) as ok: settled, not re-read
        self._failed: set[str] = set()  # paths emitted (or stored) as failed
        self._pending: dict[str, tuple[int, int, datetime]] = {}  # failed once, unconfirmed
        self._problems_seen: set[str] = set()
        self.history: list[Checkpoint] = []
        self.last: ScanResult | None = None
        self.new_problems: list[str] = []  # problems of the last poll not reported before
        for key in stored:
            _, _, key_tier, path, *rest = key
            if key_tier == tier:
                (self._ok if (rest[0] if rest else "ok") == "ok" else self._failed).add(path)

    def poll(self, now: datetime | None = None) -> list[Checkpoint]:
        result = _Scan(self.tier, self.root, self.run, self.grace_s, frozenset(self._ok)).scan(now)
        out, pending = [], {}
        for ck in result.checkpoints:
            if ck.status == "ok":
                self._ok.add(ck.path)
                out.append(ck)
            elif ck.path not in self._failed:
                sig = (ck.files, ck.bytes, ck.end_ts)
                if self._pending.get(ck.path) == sig:
                    self._failed.add(ck.path)
                    out.append(ck)
                else:
                    pending[ck.path] = sig
        self._pending = pending
        self.new_problems = [p for p in result.problems if p not in self._problems_seen]
        self._problems_seen.update(result.problems)
        self.last = result
        self.history.extend(out)
        return out


def _check(tier: str, grace_s: float) -> None:
    if tier not in TIERS:
        raise UnknownTierError(tier)
    if not grace_s >= 0:
        raise ValueError(f"grace_s must be a number of seconds >= 0, not {grace_s!r}")


def _clean(text: str) -> str:
    """A file name as valid UTF-8 text (undecodable bytes shown as ``\\xNN``)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _show(path: str) -> str:
    """A path for a one-line message: control characters (a newline in a name) escaped."""
    return _clean(path).translate(_CONTROL)


def _ts(epoch_s: float) -> datetime:
    return _EPOCH + timedelta(seconds=epoch_s)


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _step_in_name(stem: str) -> int | None:
    found = list(_FILE_STEP.finditer(stem))
    steps = [m for m in found if m[1].lower() == "step"] or found
    return int(steps[-1][2]) if steps else None


def _whole(path: str, size: int) -> bool | None:
    """Whether a single-file checkpoint is whole by its own format; None when it cannot say."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if path.lower().endswith(".safetensors"):
            if len(head) < 8:
                return False
            n = int.from_bytes(head, "little")
            if n > min(size - 8, _MAX_SAFETENSORS_HEADER):
                return False
            try:
                header = json.loads(fh.read(n))
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                return 8 + n + max(ends, default=0) == size
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return False
        if head[:4] != b"PK\x03\x04":
            return False if size == 0 else None
        for span in (22, 22 + 65535):  # a zip without a comment, then with one
            span = min(span, size)
            fh.seek(size - span)
            tail = fh.read(span)
            at = tail.rfind(_EOCD)
            if at >= 0 and at + 22 + int.from_bytes(tail[at + 20 : at + 22], "little") == span:
                return True
        return False


def _ds_whole(path: str, named: int) -> bool:
    """Whether a DeepSpeed tag below the one ``latest`` names is a save that finished, though
    ``latest`` no longer says so (it names only the newest): every ``.pt`` in it a whole
    torch.save zip, and as many ranks' optimizer states as the named tag holds. A save that
    died, followed by a restart and a later save, leaves a tag below ``latest`` that it never
    named, with a rank's shard missing or cut off."""
    def shards(d: str) -> list[str]:
        try:
            return [n for n in os.listdir(d) if n.endswith("optim_states.pt")]
        except OSError:
            return []
    own = shards(path)
    if len(own) < len(shards(os.path.join(os.path.dirname(path), f"global_step{named}"))):
        return False
    try:
        pts = [e for e in os.scandir(path) if e.name.endswith(".pt") and e.is_file()]
        return all(_whole(e.path, e.stat().st_size) is not False for e in pts)
    except OSError:
        return False


_Tracker = tuple[int | None, float | None]  # Megatron's tracked iteration and the tracker's mtime


@dataclass
class _Files:
    files: int = 0
    bytes: int = 0
    oldest: float = float("inf")
    newest: float = float("-inf")
    names: set[str] = field(default_factory=set)  # file names directly in the checkpoint

    def add(self, size: int, mtime: float) -> None:
        self.files += 1
        self.bytes += size
        self.oldest = min(self.oldest, mtime)
        self.newest = max(self.newest, mtime)


class _Scan:
    def __init__(
        self,
        tier: str,
        root: str | os.PathLike[str],
        run: str | None,
        grace_s: float,
        settled: frozenset[str],
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.run, self.grace_s, self.settled = run, grace_s, settled
        self.root_name = _clean(os.path.basename(self.root)) or None
        self.result = ScanResult(tier, _clean(self.root))
        self.counts = self.result.counts
        self.visited: set[tuple[int, int]] = set()  # directories entered through a symlink

    def scan(self, now: datetime | None) -> ScanResult:
        now = now or datetime.now(UTC)
        if now.tzinfo is not None:  # convert at the edge: naive UTC from here on
            now = now.astimezone(UTC).replace(tzinfo=None)
        self.now_s = (now - _EPOCH).total_seconds()
        shown = _show(self.root)
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            self.result.problems.append(f"checkpoint root {shown} does not exist")
        except OSError as e:
            self.result.problems.append(f"checkpoint root {shown}: cannot read ({e.strerror})")
        else:
            if not stat.S_ISDIR(st.st_mode):
                self.result.problems.append(f"checkpoint root {shown} is not a directory")
            else:
                real = os.path.realpath(self.root)
                self.root_real = real
                self._container(self.root, real, (), 0)
        for rows in (self.result.checkpoints, self.result.in_progress):
            rows.sort(key=lambda c: (c.run or "", c.step, c.path))
        return self.result

    def _problem(self, path: str, what: str) -> None:
        self.result.problems.append(f"{_show(path)}: {what}")

    def _list(self, path: str) -> list[os.DirEntry[str]] | None:
        try:
            with os.scandir(path) as it:
                return list(it)
        except FileNotFoundError:  # removed while scanning (rotation): nothing to report
            return None
        except OSError as e:
            self._problem(path, f"cannot read ({e.strerror})")
            return None

    def _kind(self, entry: os.DirEntry[str], real_dir: str) -> tuple[str | None, str]:
        """(``dir``, ``file`` or None when not followed, the entry's real path)."""
        if not entry.is_symlink():
            kind = "dir" if entry.is_dir(follow_symlinks=False) else "file"
            return kind, os.path.join(real_dir, entry.name)
        try:
            st = os.stat(entry.path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                self._problem(entry.path, "symlink loop, not followed")
            elif e.errno == errno.ENOENT:
                self._problem(entry.path, "broken symlink, skipped")
            else:
                self._problem(entry.path, f"cannot follow symlink ({e.strerror})")
            return None, entry.path
        real = os.path.realpath(entry.path)
        if not stat.S_ISDIR(st.st_mode):
            return "file", real
        if _inside(real_dir, real) or _inside(self.root_real, real):
            self._problem(entry.path, "symlink loop (leads to a directory above it), not followed")
            return None, real
        if _inside(real, self.root_real):  # an alias of a directory scanned anyway
            self.counts["symlinks_skipped"] += 1
            return None, real
        if (st.st_dev, st.st_ino) in self.visited:
            self._problem(entry.path, "symlink to a directory already scanned, not followed")
            return None, real
        self.visited.add((st.st_dev, st.st_ino))
        return "dir", real

    def _container(self, path: str, real: str, parts: tuple[str, ...], depth: int) -> None:
        entries = self._list(path)
        if entries is None:
            return
        self.counts["dirs"] += 1
        names = {e.name for e in entries}
        iters = any(_MEGATRON_DIR.fullmatch(e.name) for e in entries)
        tracker = self._tracker(path) if iters and TRACKER in names else (None, None)
        if iters and TRACKER not in names:
            self._problem(path, f"Megatron iterations without {TRACKER}: each counts as complete "
                          "only if it holds a torch_dist .metadata")  # fmt: skip
        latest = self._ds_latest(path) if DS_LATEST in names else (None, None)
        for e in entries:
            kind, sub = self._kind(e, real)
            name = e.name
            if kind == "dir":
                fm = next(((f, m) for f, rx in _DIRS if (m := rx.fullmatch(name))), None)
                ds = _DS_DIR.fullmatch(name)
                has_latest = DS_LATEST in names
                if ds and self._deepspeed(int(ds["step"]), e.path, parts, latest, has_latest):
                    pass
                elif fm and self._directory(fm[0], int(fm[1]["step"]), e.path, parts, tracker):
                    pass
                elif name.startswith(".") or (name == "release" and TRACKER in names):
                    self.counts["skipped_dirs"] += 1
                elif depth >= MAX_DEPTH:
                    self.counts["too_deep"] += 1
                    self._problem(e.path, f"deeper than {MAX_DEPTH} levels below the root, skipped")
                else:
                    self._container(e.path, sub, (*parts, name), depth + 1)
            elif kind == "file" and name != TRACKER and not (name == DS_LATEST and latest[0]):
                if name.lower().endswith(_FILE_SUFFIXES):
                    self._plain(e, parts)
                else:
                    self.counts["other_files"] += 1

    def _tracker(self, dirpath: str) -> _Tracker:
        path = os.path.join(dirpath, TRACKER)
        try:
            with open(path, "rb") as fh:
                raw, mtime = fh.read(256), os.fstat(fh.fileno()).st_mtime
        except OSError as e:
            self._problem(path, f"cannot read ({e.strerror}); iterations judged by their own files")
            return None, None
        text = raw.decode("utf-8", "replace").strip()
        if re.fullmatch(r"[0-9]+", text):
            return int(text), mtime
        if text != "release":
            shown = _show(text[:40] + ("..." if len(text) > 40 else ""))
            self._problem(path, f"holds '{shown}', not an iteration number or 'release'; "
                          "iterations judged by their own files")  # fmt: skip
        return None, None

    def _ds_latest(self, dirpath: str) -> _Tracker:
        """DeepSpeed's ``latest``: the step of the tag it names, and its mtime."""
        path = os.path.join(dirpath, DS_LATEST)
        try:
            with open(path, "rb") as fh:
                raw, mtime = fh.read(256), os.fstat(fh.fileno()).st_mtime
        except OSError:
            return None, None
        m = _DS_DIR.fullmatch(raw.decode("utf-8", "replace").strip())
        return (int(m["step"]), mtime) if m else (None, None)

    def _deepspeed(
        self, step: int, path: str, parts: tuple[str, ...], latest: _Tracker, has_latest: bool
    ) -> bool:
        """A DeepSpeed ``global_stepN`` directory; False for one that is not (DCP shards in it,
        or neither DeepSpeed's files nor its ``latest`` beside it)."""
        if self._settled(path):
            return True
        files = self._collect(path)
        if files is None:
            return True
        if any(n.endswith(_DCP_FILES) for n in files.names):
            return False
        if not has_latest and not any(n.endswith(_DS_FILES) for n in files.names):
            return False
        complete: bool | None = None
        marker = None
        if latest[0] is not None:
            complete = step == latest[0] or (step < latest[0] and _ds_whole(path, latest[0]))
            marker = latest[1] if step == latest[0] else None
        self._emit("deepspeed", step, path, parts, files, complete, marker)
        return True

    def _collect(self, path: str) -> _Files | None:
        """Every regular file below a checkpoint directory, one stat each."""
        out, stack = _Files(), [path]
        while stack:
            d = stack.pop()
            entries = self._list(d)
            if entries is None:
                if d == path:
                    return None
                continue
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                        continue
                    st = e.stat()
                except FileNotFoundError:
                    continue  # removed while scanning (rotation)
                except OSError as err:
                    self._problem(e.path, f"cannot stat ({err.strerror})")
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.add(st.st_size, st.st_mtime)
                    if d == path:
                        out.names.add(e.name)
        if not out.files:
            try:
                out.oldest = out.newest = os.stat(path).st_mtime
            except OSError:
                return None
        return out

    def _settled(self, path: str) -> bool:
        if _clean(path) in self.settled:
            self.counts["settled"] += 1
            return True
        return False

    def _directory(
        self, fmt: str, step: int, path: str, parts: tuple[str, ...], tracker: _Tracker
    ) -> bool:
        """A checkpoint directory; False for a step directory without DCP files (a folder)."""
        if self._settled(path) or (files := self._collect(path)) is None:
            return True
        names, marker = files.names, None
        if fmt == "hf":
            tmp = os.path.basename(path).startswith("tmp-")  # saved, not yet renamed into place
            complete = "trainer_state.json" in names and not tmp
            if complete and os.path.isdir(os.path.join(path, f"global_step{step}")):
                tag = self._ds_latest(path)[0] if DS_LATEST in names else None
                complete = tag == step  # DeepSpeed's own save inside it finished too
        elif fmt == "megatron" and tracker[0] is not None:
            complete = step <= tracker[0]
            marker = tracker[1] if step == tracker[0] else None
        elif fmt == "dcp" and files.files and not any(n.endswith(_DCP_FILES) for n in names):
            return False
        else:  # DCP, or Megatron without a usable tracker (torch_dist writes .metadata last)
            complete = ".metadata" in names
        self._emit(fmt, step, path, parts, files, complete, marker)
        return True

    def _plain(self, entry: os.DirEntry[str], parts: tuple[str, ...]) -> None:
        step = _step_in_name(entry.name.rsplit(".", 1)[0])
        if step is None:
            self.counts["unrecognised"] += 1
            return
        if self._settled(entry.path):
            return
        try:
            st = entry.stat()
            if not stat.S_ISREG(st.st_mode):
                self.counts["other_files"] += 1
                return
            whole = _whole(entry.path, st.st_size)
        except FileNotFoundError:
            return
        except OSError as e:
            self._problem(entry.path, f"cannot read ({e.strerror})")
            return
        files = _Files()
        files.add(st.st_size, st.st_mtime)
        self._emit("file", step, entry.path, parts, files, whole)

    def _emit(
        self,
        fmt: str,
        step: int,
        path: str,
        parts: tuple[str, ...],
        files: _Files,
        complete: bool | None,
        marker_mtime: float | None = None,
    ) -> None:
        """``complete`` None: the format cannot tell; whole once unchanged for the grace period."""
        end = max(files.newest, marker_mtime or files.newest)
        settled = self.now_s - end > self.grace_s
        if complete or (complete is None and settled):
            status = "ok"
            self.counts["unverified"] += complete is None
        else:
            status = "failed" if settled else "in_progress"
        run = self.run
        if run is None:
            run = next((_clean(p) for p in parts if p.lower() not in _GENERIC), self.root_name)
        ck = Checkpoint(
            run=run, step=step, tier=self.result.tier, path=_clean(path), format=fmt,
            bytes=files.bytes, files=files.files, start_ts=_ts(files.oldest), end_ts=_ts(end),
            write_s=round(end - files.oldest, 3) if files.files > 1 else None, status=status,
        )  # fmt: skip
        (self.result.in_progress if status == "in_progress" else self.result.checkpoints).append(ck)
        self.counts[status] += 1
        self.counts[fmt] += 1
        self.counts["files"] += files.files
