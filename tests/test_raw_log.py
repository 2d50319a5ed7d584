"""Each evidence line opens the raw log around it (issue 57, item 10): a bad night imported
with the user's command keeps where each log file is (``log_files``), and the incident's
data reads the 20 lines either side of an evidence line from that file alone. Bounds: a file
gone, swapped for a symlink or FIFO, rewritten, or a line past the read bound is a note in
words, never an exception, and a request cannot name a file."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.data import incident, services
from telemetry import logview
from telemetry.queries import log_files
from telemetry.store import Store
from tests.cluster_fixture import RUN, Night, build
from tests.conftest import cli

XID_AT = "2026-03-01T09:53:20"  # the XID 79 stop's start (its evidence: the kernel line first)
IB_AT = "2026-03-01T11:25:40"


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> tuple[Night, Path]:
    n = build(tmp_path_factory.mktemp("night"))
    store = tmp_path_factory.mktemp("store") / "night.duckdb"
    r = cli(*n.import_args(store))
    assert r.returncode == 0, r.stderr
    return n, store


@pytest.fixture
def bound(night: tuple[Night, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    store = Store(str(night[1]), read_only=True)
    monkeypatch.setattr(services, "_services", None)
    services.bind(store)
    yield store
    store.close()


def test_the_import_keeps_each_log_files_resolved_path(bound: Store, night) -> None:
    n, _ = night
    assert log_files.path_of(bound, RUN, str(n.job_log)) == os.path.realpath(n.job_log)
    assert log_files.path_of(bound, RUN, str(n.kern_log)) == os.path.realpath(n.kern_log)
    assert log_files.path_of(bound, RUN, "/etc/passwd") is None


def test_an_evidence_line_opens_the_20_lines_around_it(bound: Store, night) -> None:
    n, _ = night
    got = incident.raw_log(RUN, IB_AT, 0)  # the IB error, the cause
    assert got["origin"] == f"{n.job_log}:598" and got["line"] == 598
    assert got["path"] == os.path.realpath(n.job_log) and got["note"] is None
    numbers = [no for no, _ in got["lines"]]
    assert numbers == list(range(578, 619))
    text = n.job_log.read_text().splitlines()
    assert got["lines"] == [(no, text[no - 1]) for no in numbers]  # the file's own lines
    assert "NET/IB : Got completion from peer" in dict(got["lines"])[598]
    # the kernel log of two lines: what there is, nothing invented around it
    kern = incident.raw_log(RUN, XID_AT, 0)
    assert kern["origin"] == f"{n.kern_log}:2" and [x for x, _ in kern["lines"]] == [1, 2]


def test_what_cannot_be_read_is_said_in_words(bound: Store, night, tmp_path: Path) -> None:
    n, _ = night
    assert incident.raw_log(RUN, IB_AT, 999)["note"].startswith("No such evidence line")
    assert incident.raw_log(RUN, IB_AT, "../../etc/passwd")["note"].startswith("No such")
    assert incident.raw_log(RUN, "2020-01-01T00:00:00", 0)["lines"] == []
    moved = tmp_path / "kern.moved"
    shutil.move(n.kern_log, moved)
    try:
        gone = incident.raw_log(RUN, XID_AT, 0)
        assert gone["lines"] == [] and "no longer there" in gone["note"]
        os.symlink("/etc/passwd", n.kern_log)  # swapped for a link: not followed
        assert "cannot be read" in incident.raw_log(RUN, XID_AT, 0)["note"]
        os.unlink(n.kern_log)
        os.mkfifo(n.kern_log)  # a FIFO would block a reader for ever
        assert "not a regular file" in incident.raw_log(RUN, XID_AT, 0)["note"]
        os.unlink(n.kern_log)
        n.kern_log.write_text("rewritten\nnot the same line\n")
        changed = incident.raw_log(RUN, XID_AT, 0)
        assert "reads otherwise" in changed["note"] and len(changed["lines"]) == 2
    finally:
        if n.kern_log.exists() or n.kern_log.is_symlink():
            os.unlink(n.kern_log)
        shutil.move(moved, n.kern_log)


def test_a_line_past_the_read_bound_says_how_to_read_it(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * 100 + b"\n" + b"filler line\n" * 100_000 + b"the line\n")
    monkeypatch.setattr(logview, "MAX_SCAN_BYTES", 64 * 1024)
    monkeypatch.setattr(logview, "BLOCK_BYTES", 16 * 1024)
    far = logview.around(str(log), 100_002)
    assert far.lines == [] and "sed -n '99982,100022p'" in far.note
    near = logview.around(str(log), 3)
    assert [x for x, _ in near.lines] == list(range(1, 24)) and near.note is None
    wide = tmp_path / "wide.log"
    wide.write_bytes(b"a\n" + b"y" * 50_000 + b"\nb\n")
    got = logview.around(str(wide), 2)
    assert len(got.lines[1][1]) == logview.MAX_LINE_CHARS and got.lines[1][1].endswith("…")


def test_an_origin_names_a_line_or_nothing() -> None:
    assert logview.split_origin("/a/b:c.log:12") == ("/a/b:c.log", 12)
    for bad in ("/a/b.log: step 3 (attempt 1)", "x:0", "x:-1", "nothing", None, 5):
        assert logview.split_origin(bad) is None


def test_a_followed_log_keeps_its_path_and_settings_too(tmp_path: Path) -> None:
    """``ingest``/``serve --logs GLOB`` (follow): the file's resolved path is kept as its lines
    arrive, and a setting appended later is stored once, where it was said."""
    from datetime import datetime

    from telemetry.collect.logs.cluster_source import ClusterSource
    from telemetry.ingest.daemon import collect
    from telemetry.ingest.writer import StoreWriter

    logs = tmp_path / "logs"
    logs.mkdir()
    job = logs / "job.out"
    job.write_text("[2026-03-01 08:00:00] iteration       10/ 100000 | lm loss: 2.5E+00 |\n")
    src = ClusterSource(globs=[str(logs / "*.out")], run="live-1", follow=True,
                        positions=str(tmp_path / "positions.json"))  # fmt: skip
    with Store(str(tmp_path / "s.duckdb")) as s:
        writer = StoreWriter(s)
        collect(src, writer, datetime(2026, 3, 1, 8, 1))
        with job.open("a") as fh:
            fh.write("  tensor_model_parallel_size ...................... 4\n"
                     "[2026-03-01 08:00:30] [rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] "
                     "Watchdog caught collective operation timeout\n")  # fmt: skip
        collect(src, writer, datetime(2026, 3, 1, 8, 2))
        collect(src, writer, datetime(2026, 3, 1, 8, 3))  # nothing new: nothing written twice
        assert log_files.path_of(s, "live-1", str(job)) == os.path.realpath(job)
        assert s.rows("SELECT name, value, origin FROM run_settings") == [
            ("tensor_parallel", "4", f"{job}:2")]
        src.close()


def test_a_store_that_kept_no_path_says_to_import_again(night, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before paths were kept (its origins alone name the file): the origin
    is not taken as a path to open."""
    copy = tmp_path / "old.duckdb"
    shutil.copy(night[1], copy)
    with Store(str(copy)) as s, s.transaction(["log_files"]) as con:
        con.execute("DELETE FROM log_files")
    with Store(str(copy), read_only=True) as s:
        monkeypatch.setattr(services, "_services", None)
        services.bind(s)
        got = incident.raw_log(RUN, IB_AT, 0)
    assert got["lines"] == [] and got["origin"] == f"{night[0].job_log}:598"
    assert got["note"].startswith(f"{night[0].job_log} is not a text log this store read")
