"""Training logs on disk as records for ``records.store_records``: JSON lines, CSV and
TensorBoard event files.

Readers are pure apart from reading the file: they return a ``FileRecords`` whose records
``store_records`` validates, with the origin (``file:line`` or ``file: step N``) of each record
so a rejection can name where it came from. A line that is not JSON, or a CSV row with more
cells than the header, becomes a ``bad_lines`` entry and the rest of the file is still read (a
crashed job's log usually ends in a torn line). A file that cannot be read at all raises
``ImportFileError`` naming it.

The GPU performance scores NVIDIA's Lightning straggler callback logs among the metrics
(``ptlperf``) are taken out of the records as run-level ``rank_perf`` rows (a refused one is a
``bad_lines`` entry); a step that held nothing else is no record.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from telemetry.collect.logs import ptlperf
from telemetry.collect.logs.rankperf import RankPerf
from telemetry.collect.logs.tbfiles import TB_PREFIX
from telemetry.errors import FactoryFloorError
from telemetry.ingest.records import FIELD_KINDS, MAX_ID_CHARS, METRICS, parse_time

# TensorBoard tag (lower case, without a ``train/`` or ``training/`` prefix) -> record field.
# Names as the common trainers write them: HF Trainer, Lightning, Megatron-LM, nanoGPT forks.
TB_TAGS = {
    "loss": "loss",
    "train_loss": "loss",
    "lm loss": "loss",
    "lm_loss": "loss",
    "lr": "lr",
    "learning_rate": "lr",
    "learning-rate": "lr",
    "grad_norm": "grad_norm",
    "grad-norm": "grad_norm",
    "gradient_norm": "grad_norm",
    "tokens": "tokens",
    "consumed_tokens": "tokens",
    "tokens_per_s": "tokens_per_s",
    "tokens_per_sec": "tokens_per_s",
    "throughput": "tokens_per_s",
    "mfu": "mfu",
}


MAX_RECORD_LINE_BYTES = 1 << 20  # one JSON line or CSV row: no record is near this
MAX_ARRAY_BYTES = 64 << 20  # a ``[...]`` JSON file is parsed whole; JSON lines stream


class ImportFileError(FactoryFloorError):
    """A log file that cannot be read: missing, unreadable, or not in the format it claims."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class BadLine:
    origin: str  # file:line
    reason: str


@dataclass(frozen=True)
class FileRecords:
    path: str
    records: list[dict[str, Any]]
    origins: list[str]  # where each record came from, same order
    bad_lines: list[BadLine] = field(default_factory=list)
    ignored_tags: dict[str, int] = field(default_factory=dict)  # TensorBoard tags not mapped
    # (run, row) of the straggler callback's scores (``ptlperf``); run None: ``--run`` fills it
    rank_perf: list[tuple[str | None, RankPerf]] = field(default_factory=list)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading when it is a regular file. It is opened without blocking
    and checked on the descriptor itself: a FIFO would block for ever, a symlink to
    ``/dev/zero`` would stream without end, and a file swapped after a ``stat`` is caught."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ImportFileError(path, "no such file") from None
    except OSError as exc:
        raise ImportFileError(path, exc.strerror or str(exc)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        other = "not a regular file (a FIFO, device or socket)"
        raise ImportFileError(path, "a directory" if stat.S_ISDIR(mode) else other)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _lines(path: Path, bad: list[BadLine]) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, read as a stream. A line over ``MAX_RECORD_LINE_BYTES``
    is skipped in bounded memory (a ``bad`` entry), as is a line that is not UTF-8."""
    with open_regular(path) as fh:
        n = 0
        while raw := fh.readline(MAX_RECORD_LINE_BYTES + 1):
            n += 1
            if len(raw) > MAX_RECORD_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw) + _skip_line(fh)
                bad.append(BadLine(f"{path}:{n}", f"line of {size:,} bytes, over the "
                                   f"{MAX_RECORD_LINE_BYTES:,} a record may be: skipped"))
                continue
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad.append(BadLine(f"{path}:{n}", f"not UTF-8 text ({exc.reason})"))


def _skip_line(fh: BinaryIO) -> int:
    """Read past the rest of a line (its newline included); how many bytes that was."""
    skipped = 0
    while chunk := fh.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def read_jsonl(path: str | os.PathLike[str]) -> FileRecords:
    """One JSON object per line (blank lines skipped); a file whose first character is ``[`` is
    read as one JSON array (at most ``MAX_ARRAY_BYTES``). Each record is whatever the line
    holds: ``store_records`` rejects what is not an object. Read as a stream: a line over
    ``MAX_RECORD_LINE_BYTES`` is a bad line, never held whole."""
    p = Path(path)
    if _starts_array(p):
        return _take_scores(_json_array(p))
    out = FileRecords(str(p), [], [])
    for n, text in _lines(p, out.bad_lines):
        if not text.strip():
            continue
        try:
            out.records.append(json.loads(text))
            out.origins.append(f"{p}:{n}")
        except json.JSONDecodeError as exc:
            out.bad_lines.append(BadLine(f"{p}:{n}", f"not JSON: {exc.msg} at column {exc.colno}"))
        except RecursionError:
            out.bad_lines.append(BadLine(f"{p}:{n}", "JSON nested too deeply"))
    return _take_scores(out)


def _starts_array(p: Path) -> bool:
    """Whether the file's first non-blank byte (within its first MiB) is ``[``."""
    with open_regular(p) as fh:
        head = fh.read(1 << 20).lstrip()
    return head.startswith(b"[")


def _json_array(p: Path) -> FileRecords:
    with open_regular(p) as fh:
        data = fh.read(MAX_ARRAY_BYTES + 1)
    if len(data) > MAX_ARRAY_BYTES:
        raise ImportFileError(p, f"a JSON array over {MAX_ARRAY_BYTES:,} bytes: write JSON "
                                 "lines (one record a line) instead")
    try:
        items = json.loads(data)
    except ValueError as exc:
        raise ImportFileError(p, f"not a JSON array ({exc})") from None
    except RecursionError:
        raise ImportFileError(p, "JSON nested too deeply") from None
    if not isinstance(items, list):
        raise ImportFileError(p, "not a JSON array")
    return FileRecords(str(p), items, [f"{p}: item {i}" for i in range(len(items))])


def _take_scores(log: FileRecords) -> FileRecords:
    """``log`` with the straggler callback's scores (``ptlperf``) taken out of its records as
    rows dated by the record's ``ts``; a record without one is dated now, as ``store_records``
    dates its metrics (then the file's undated records are given that ``ts``, so its metrics and
    scores share it). A record left with no metric is dropped."""
    now = datetime.now(UTC).replace(tzinfo=None)
    out = FileRecords(log.path, [], [], list(log.bad_lines), dict(log.ignored_tags))
    for rec, origin in zip(log.records, log.origins, strict=True):
        keys = {}
        if isinstance(rec, dict):
            keys = {k: n for k in rec if isinstance(k, str) and (n := ptlperf.name_of(k))}
        if keys:
            values = {n: rec.pop(k) for k, n in keys.items()}
            try:
                run = _run_of(rec)
                ts = now if rec.get("ts") is None else parse_time(rec["ts"], now)
                rows, refused = ptlperf.step_rows(values, ts, origin)
                out.rank_perf.extend((run, r) for r in rows)
                out.bad_lines.extend(BadLine(origin, why) for why in refused)
            except ValueError as exc:
                out.bad_lines.append(BadLine(origin, f"straggler scores not stored: {exc}"))
            if all(rec.get(m) is None for m in METRICS):
                continue
        out.records.append(rec)
        out.origins.append(origin)
    for rec in out.records if out.rank_perf else []:  # the file's undated steps: one time
        if isinstance(rec, dict) and rec.get("ts") is None:
            rec["ts"] = now.isoformat()
    return out


def _run_of(rec: dict[str, Any]) -> str | None:
    run = rec.get("run")
    if run is None or isinstance(run, str) and 0 < len(run) <= MAX_ID_CHARS and run.isprintable():
        return run
    raise ValueError(f"run {str(run)[:40]!r} is not a run id")


def _cell(name: str, text: str) -> Any:
    """A CSV cell as the JSON value its field takes; text that does not convert stays text,
    so validation rejects the record with the field's reason."""
    kind = FIELD_KINDS.get(name)
    if kind == "bool":
        return {"true": True, "false": False, "1": True, "0": False}.get(text.lower(), text)
    if kind in ("num", "ts"):
        for conv in (int, float):
            try:
                return conv(text)
            except ValueError:
                pass
    return text


def read_csv(path: str | os.PathLike[str]) -> FileRecords:
    """A CSV file with a header row of record field names; empty cells are absent fields.
    Numeric, time and boolean fields are converted (``true``/``false``, ``1``/``0``)."""
    p = Path(path)
    bad: list[BadLine] = []
    at = [0]  # the file's line number of the last line read (skipped lines count too)

    def texts() -> Iterator[str]:
        for n, text in _lines(p, bad):
            at[0] = n
            yield text

    reader = csv.reader(texts())
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ImportFileError(p, "empty file: expected a header row of field names") from None
    except csv.Error as exc:
        raise ImportFileError(p, f"line 1: {exc}") from None
    out = FileRecords(str(p), [], [], bad)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return _take_scores(out)
        except csv.Error as exc:
            out.bad_lines.append(BadLine(f"{p}:{at[0]}", str(exc)))
            continue
        where = f"{p}:{at[0]}"
        if not any(c.strip() for c in row):
            continue
        if len(row) > len(header):
            out.bad_lines.append(BadLine(where, f"{len(row)} cells, header has {len(header)}"))
            continue
        cells = zip(header, row, strict=False)
        out.records.append({k: _cell(k, v.strip()) for k, v in cells if k and v.strip()})
        out.origins.append(where)


def event_files(path: str | os.PathLike[str]) -> list[Path]:
    """The TensorBoard event files at ``path``: the file itself, or a directory's own
    ``events.out.tfevents.*`` files in name (= creation time) order; subdirectories are other
    runs and are not read."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.name.startswith(TB_PREFIX) and f.is_file())
        if not files:
            raise ImportFileError(p, f"no {TB_PREFIX}* files in this directory")
        return files
    if not p.exists():
        raise ImportFileError(p, "no such file or directory")
    open_regular(p).close()  # a FIFO or a device would block or never end
    return [p]


def _scalars(path: Path) -> Iterator[tuple[str, int, float, float | None]]:
    """(tag, step, wall_time, value) of every summary value; value None for non-scalars. The
    loader migrates legacy ``simple_value`` scalars to the tensor form newer writers use."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    try:
        events = list(EventFileLoader(str(path)).Load())
    except Exception as exc:  # the loader raises protobuf and OS errors of many kinds
        raise ImportFileError(path, f"not a readable TensorBoard event file ({exc})") from None
    for ev in events:
        for v in ev.summary.value:
            number = None
            if v.metadata.plugin_data.plugin_name == "scalars":
                arr = tensor_util.make_ndarray(v.tensor)
                if arr.size == 1 and arr.dtype.kind in "fiu":
                    number = float(arr.item())
            yield v.tag, int(ev.step), float(ev.wall_time), number


def _field_for(tag: str) -> str | None:
    t = tag.lower()
    for prefix in ("train/", "training/"):
        t = t.removeprefix(prefix)
    return TB_TAGS.get(t)


def read_tensorboard(path: str | os.PathLike[str], run: str) -> FileRecords:
    """Scalars of the event file(s) at ``path`` as ``train_metrics`` records of ``run``: one
    record per (attempt, step), ``ts`` the step's earliest wall time. Tags are mapped by
    ``TB_TAGS`` (the straggler callback's scores: ``ptlperf``); other tags and non-scalar
    summaries are counted in ``ignored_tags``. When a
    tag's step goes backwards the job restarted from a checkpoint: the following steps belong
    to the next ``attempt``."""
    files = event_files(path)
    steps: dict[tuple[int, int], dict[str, Any]] = {}
    last: dict[str, int] = {}
    attempt: Counter[str] = Counter()
    ignored: Counter[str] = Counter()
    read_any = False
    for f in files:
        for tag, step, wall, value in _scalars(f):
            read_any = True
            name = _field_for(tag) or ptlperf.name_of(tag)
            if name is None or value is None:
                ignored[tag[:64]] += 1
                continue
            if step < last.get(tag, step):
                attempt[tag] += 1
            last[tag] = step
            rec = steps.setdefault((attempt[tag], step), {"run": run, "step": step, "ts": wall})
            rec.update({name: value, "ts": min(rec["ts"], wall), "attempt": attempt[tag]})
    if not read_any:
        raise ImportFileError(path, "no TensorBoard summaries found (not an event file?)")
    keys = sorted(steps)
    origins = [f"{path}: step {s} (attempt {a})" for a, s in keys]
    log = FileRecords(str(path), [steps[k] for k in keys], origins, [], dict(ignored))
    return _take_scores(log)
