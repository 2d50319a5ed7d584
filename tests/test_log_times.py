"""A log line's time is data only when it could be: any cluster user can print
``[Fri Dec 31 23:59:59 9999] NVRM: Xid ...`` into a job's output, and an impossible stamp
(``Feb 30 25:61:61``) is no time at all. Both are refused by the real ``import``, listed as not
recognised at their ``file:line``, and the rest of the file is stored as before (issue 55)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from telemetry.store import Store
from tests.conftest import cli

NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
DAY = NOW - timedelta(days=3)  # the file's own days: recent, as a real import's are
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


def _dmesg(t: datetime) -> str:
    return f"[{t:%a %b} {t.day:2d} {t:%H:%M:%S %Y}] {XID}"


def _iteration(step: int, stamp: str) -> str:
    return (f"[{stamp}] iteration {step:8d}/    1000 | consumed samples: {step * 512:12d} | "
            "elapsed time per iteration (ms): 1000.0 | learning rate: 1.0E-04 | global batch "
            "size:   512 | lm loss: 2.5E+00 | loss scale: 1.0 | grad norm: 1.000 | number of "
            "nan iterations:   0 |")


def _rows(store: Path, sql: str) -> list[tuple]:
    with Store(str(store), read_only=True) as s:
        return s.rows(sql)


def test_a_kernel_log_line_dated_9999_or_feb_30_is_not_data(tmp_path: Path) -> None:
    kern = tmp_path / "node-7-kern.log"
    kern.write_text("\n".join([
        _dmesg(DAY),
        "[Fri Dec 31 23:59:59 9999] " + XID,  # any user's job can print this
        "[Fri Feb 30 25:61:61 2025] " + XID,  # no such instant
        _dmesg(DAY + timedelta(minutes=5)),
    ]) + "\n")
    syslog = tmp_path / "syslog-node-8.log"  # year-less: the year comes from the other lines
    syslog.write_text(f"{DAY:%b} {DAY.day:2d} {DAY:%H:%M:%S} node-8 kernel: {XID}\n"
                      f"Feb 30 25:61:61 node-8 kernel: {XID}\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r1", str(kern), str(syslog))
    assert r.returncode == 0, r.stderr
    assert f"{kern}: 4 lines: 0 train_metrics records stored, signals: xid 2" in r.stdout
    assert "2 lines not recognised" in r.stdout and "1 lines not recognised" in r.stdout
    assert f"  not recognised {kern}:2: time 9999-12-31 23:59:59 is outside" in r.stdout
    assert f"{kern}:3: " in r.stdout and "no real time" in r.stdout
    assert f"not recognised {syslog}:2: 02-30 25:61:61 is no real time: not data" in r.stdout
    stored = _rows(store, "SELECT ts, origin FROM signals ORDER BY origin")
    assert [o for _, o in stored] == [f"{kern}:1", f"{kern}:4", f"{syslog}:1"]
    assert all(DAY - timedelta(seconds=1) <= t <= NOW for t, _ in stored), stored
    xids = _rows(store, "SELECT min(ts), max(ts), count(*) FROM xid_events")[0]
    assert xids[2] == 3 and xids[1] <= NOW and xids[0].year > 1970


def test_a_job_log_line_far_from_the_files_other_times_is_not_data(tmp_path: Path) -> None:
    t = [DAY + timedelta(seconds=i) for i in range(40)]
    ok = [_iteration(i, f"{t[i]:%Y-%m-%d %H:%M:%S}") for i in range(1, 31)]  # read column-wise
    log = tmp_path / "slurm-1.out"
    log.write_text("\n".join([
        *ok[:15],
        _iteration(31, "9999-12-31 23:59:59"),  # in the column-wise path's shape
        _iteration(32, "2001-01-01 00:00:00"),  # after 2000, yet 20+ years from its neighbours
        *ok[15:],
        f"{t[35]:%Y-%m-%dT%H:%M:%S} host-1:1:1 [0] NCCL WARN a real one",
        "9999-12-31T23:59:59 host-1:1:1 [0] NCCL WARN printed by the job",
        "2024-02-30T25:61:61 host-1:1:1 [0] NCCL WARN no such instant",
        "host-1:1:1 [0] NCCL WARN no time of its own: the most recent real one",
    ]) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r1", str(log))
    assert r.returncode == 0, r.stderr
    assert f"{log}: 36 lines: 30 train_metrics records stored, signals: nccl_error 2" in r.stdout
    assert "4 lines not recognised" in r.stdout
    for line in (16, 17, 34, 35):
        assert f"{log}:{line}: " in r.stdout
    steps = _rows(store, "SELECT step, ts FROM train_metrics ORDER BY step")
    assert steps == [(i, t[i]) for i in range(1, 31)]
    signals = _rows(store, "SELECT ts, origin FROM signals ORDER BY origin")
    assert signals == [(t[35], f"{log}:33"), (t[35], f"{log}:36")]  # not 9999's context


def test_the_window_past_the_servers_clock_is_a_setting(tmp_path: Path) -> None:
    ahead = NOW + timedelta(hours=30)
    kern = tmp_path / "node-7-kern.log"
    kern.write_text(_dmesg(NOW - timedelta(hours=1)) + "\n" + _dmesg(ahead) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "r1", str(kern))  # default: 1 day
    assert r.returncode == 0 and "signals: xid 1," in r.stdout and f"{kern}:2: time" in r.stdout
    r = cli("import", "--store", str(tmp_path / "t.duckdb"), "--run", "r1",
            "--log-max-future", "2d", str(kern))
    assert r.returncode == 0 and "signals: xid 2," in r.stdout, r.stdout
