"""The ingest daemon's durable on-disk spool: batches wait here until the server has them.

Every batch is written to the spool before it is sent, and removed only after the server has
acknowledged it. Together with the server's record of batch ids (``ingest_batches``) this gives
exactly-once delivery across a server outage, a lost reply, or the daemon being killed:

* a batch file is written to ``*.part``, flushed, fsync'd and renamed, so after a crash it
  is either whole or absent (``*.part`` left by a crash are removed when the spool opens);
* the name carries a sequence number (delivery order) and the batch id (what the server
  deduplicates on), so a batch sent, stored, but not yet removed when the daemon died is sent
  again after the restart and answered "duplicate" without being stored twice.

The spool is bounded (``max_bytes``): when full, ``put`` refuses the new batch and says so,
keeping the older ones (the oldest data is what the server lacks longest). One daemon owns a
spool directory at a time (an exclusive ``flock``), so two daemons cannot send the same files.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from telemetry.errors import FactoryFloorError

_NAME = re.compile(r"^(?P<seq>\d{12})-(?P<id>[0-9a-f-]{36})\.batch$")


class SpoolError(FactoryFloorError):
    pass


@dataclass(frozen=True)
class Spooled:
    path: Path
    seq: int
    batch_id: str
    size: int

    def read(self) -> bytes:
        return self.path.read_bytes()


class Spool:
    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.rejected_dir = self.dir / "rejected"
            self.rejected_dir.mkdir(exist_ok=True)
            self._lockf = open(self.dir / ".lock", "a+")  # noqa: SIM115 (held for the lifetime)
        except OSError as exc:
            raise SpoolError(f"spool {self.dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lockf.seek(0)
            holder = self._lockf.read().strip() or "another process"
            raise SpoolError(
                f"spool {self.dir} is in use by {holder}; one ingest daemon per spool directory "
                "(pass another --spool)"
            ) from None
        self._lockf.seek(0)
        self._lockf.truncate()
        self._lockf.write(f"PID {os.getpid()}\n")
        self._lockf.flush()
        self._mutex = threading.Lock()
        for part in self.dir.glob("*.part"):  # half-written by a daemon that died mid-write
            part.unlink(missing_ok=True)
        items = self.pending()
        self._next = (items[-1].seq + 1) if items else 1
        self._bytes = sum(i.size for i in items)

    def close(self) -> None:
        self._lockf.close()

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def put(self, payload: bytes, batch_id: str | None = None) -> Spooled | None:
        """Durably store one batch; None (nothing written) when the spool is full."""
        batch_id = batch_id or str(uuid.uuid4())
        with self._mutex:
            if self._bytes + len(payload) > self.max_bytes:
                return None
            seq = self._next
            self._next += 1
            final = self.dir / f"{seq:012d}-{batch_id}.batch"
            part = final.with_suffix(".part")
            try:
                with open(part, "wb") as fh:
                    fh.write(payload)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(part, final)
                self._fsync_dir()
            except OSError as exc:
                part.unlink(missing_ok=True)
                raise SpoolError(f"spool {self.dir}: cannot write a batch: {exc}") from None
            self._bytes += len(payload)
            return Spooled(final, seq, batch_id, len(payload))

    def pending(self) -> list[Spooled]:
        """Spooled batches, oldest first."""
        out = []
        for p in self.dir.iterdir():
            m = _NAME.match(p.name)
            if m:
                try:
                    size = p.stat().st_size
                except FileNotFoundError:
                    continue
                out.append(Spooled(p, int(m["seq"]), m["id"], size))
        return sorted(out, key=lambda s: s.seq)

    def ack(self, item: Spooled) -> None:
        """The server has the batch: forget it."""
        with self._mutex:
            item.path.unlink(missing_ok=True)
            self._bytes = max(0, self._bytes - item.size)
            self._fsync_dir()

    def reject(self, item: Spooled) -> Path:
        """The server refused the batch for good (HTTP 4xx): keep it aside for a human, out
        of the delivery queue, so one bad batch cannot block the ones behind it."""
        with self._mutex:
            self.rejected_dir.mkdir(exist_ok=True)  # an operator may have cleared it
            dest = self.rejected_dir / item.path.name
            os.replace(item.path, dest)
            self._bytes = max(0, self._bytes - item.size)
            self._fsync_dir()
            return dest

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
