"""The ``factoryfloor`` command line, run as a user would run it (a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.store import Store
from tests.conftest import build_store, cli, free_port

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time


@pytest.mark.parametrize(
    "args, expected",
    [
        (["replay", "--scenario", "nope", "--store", "x.duckdb"], "unknown scenario 'nope'"),
        (["replay", "--scenario", "dev-64"], "--store"),
        (["replay", "--scenario", "dev-64", "--store", "x", "--speed", "-3"], "positive"),
        (["replay", "--scenario", "dev-64", "--store", "x", "--seed", "abc"], "not an integer"),
        (["serve", "--store", "x.duckdb", "--port", "99999"], "not a TCP port"),
        (["serve", "--store", "x.duckdb", "--port", "http"], "not a TCP port"),
        (["frobnicate"], "invalid choice"),
        (["replay", "--scenario", "dev-64", "--store", "x", "--nodes", "0"], "give 1 to 16,384"),
        (["replay", "--scenario", "dev-64", "--store", "x", "--nodes", "4k"], "whole number"),
        (
            ["replay", "--scenario", "dev-64", "--store", "x", "--backfill", "--speed", "2"],
            "not allowed with",
        ),
    ],
)
def test_wrong_arguments_get_one_line_and_exit_2(args: list[str], expected: str) -> None:
    r = cli(*args)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_runtime_errors_are_one_line_too(tmp_path: Path) -> None:
    missing = tmp_path / "missing.duckdb"
    for args, expected in [
        (["serve", "--store", str(missing)], "does not exist"),
        (["summary", "--store", str(missing)], "does not exist"),
        (["serve", "--store", str(missing), "--host", "0.0.0.0"], "--allow-remote"),
        (
            ["replay", "--scenario", "dev-64", "--store", str(tmp_path / "no" / "s.duckdb")],
            "does not exist",
        ),
        (  # 18 slow or hot GPUs do not fit on 2 nodes
            ["replay", "--scenario", "llama3-405b", "--store", str(tmp_path / "n.duckdb")]
            + ["--nodes", "2"],
            "give at least 3 nodes",
        ),
    ]:
        r = cli(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and expected in r.stderr, r.stderr
    assert not (tmp_path / "n.duckdb").exists()  # the refused replay created no store


def test_scenarios_lists_the_three_with_descriptions() -> None:
    r = cli("scenarios", "--json", check=True)
    names = {s["name"]: s for s in json.loads(r.stdout)}
    assert {"dev-64", "llama3-405b", "lemon-cooling"} <= set(names)
    assert names["llama3-405b"]["gpus"] == 16384


def test_replay_then_summary_json(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    args = ("replay", "--scenario", "dev-64", "--store", str(store), "--seed", "3", "--days", "0.5")
    r = cli(*args, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "GPU samples" in r.stdout
    # A backfill is dated at the scenario's start, months before today: it says so (#37)
    assert "simulated time 2026-01-05 00:00 - 2026-01-05 12:00 UTC" in r.stdout
    assert "2026-01-05 00:00 UTC: a backfill is dated there" in " ".join(
        cli("replay", "--help", check=True).stdout.split()
    )
    out = json.loads(cli("summary", "--store", str(store), "--json", check=True).stdout)
    (run,) = out["runs"]
    for key in (
        "run_id",
        "gpus",
        "wall_hours",
        "ettr",
        "mtbf_hours",
        "mfu",
        "interruptions",
        "checkpoints",
        "restores",
        "lost_gpu_hours",
    ):
        assert key in run
    assert run["gpus"] == 64 and 11.5 < run["wall_hours"] <= 12.0
    assert set(run["checkpoints"]) <= {"nvme", "pfs", "object"}
    assert run["checkpoints"]["nvme"]["count"] > 100
    ints = run["interruptions"]
    assert sum(ints["by_component"].values()) == ints["unexpected"]
    assert 0.3 < run["mfu"] < 0.5 and 0.5 < run["ettr"] <= 1.0
    # Replaying the same run into the same store again is refused, not duplicated.
    again = cli(*args, "--no-progress")
    assert again.returncode == 1 and "already in store" in again.stderr


def test_replay_of_a_larger_fleet_than_the_scenario_s(tmp_path: Path) -> None:
    """``--nodes`` resizes the simulated fleet (issue #16 measures 65,536 GPUs with it): the
    job nodes asked for, the scenario's hot spares beside them, and the summary says so."""
    store = tmp_path / "big.duckdb"
    r = cli("replay", "--scenario", "dev-64", "--store", str(store), "--nodes", "12",
            "--days", "0.05", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(cli("summary", "--store", str(store), "--json", check=True).stdout)["runs"]
    assert run["gpus"] == 96
    with Store(str(store), read_only=True) as s:
        assert s.rows("SELECT role, count(*) FROM nodes GROUP BY role ORDER BY role") == [
            ("job", 12), ("spare", 2)
        ]  # fmt: skip


def test_replay_into_an_owned_store_says_who_owns_it(tmp_path: Path) -> None:
    from telemetry.store import Store

    path = build_store(tmp_path / "owned.duckdb", days=0.05)
    with Store(str(path)):
        r = cli("replay", "--scenario", "dev-64", "--store", str(path), "--no-progress")
    assert r.returncode == 1
    assert str(path) in r.stderr and "in use by another process" in r.stderr
    assert "Traceback" not in r.stderr


def test_ingest_and_serve_errors_are_one_line(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "scrape.yaml"
    bad_yaml.write_text("interval: 15\ntimeout: 30\ntargets: ['a:9400']\n")
    short = tmp_path / "token"
    short.write_text("abc\n")
    store = str(tmp_path / "s.duckdb")
    for args, code, expected in [
        (
            ["ingest", "--store", store, "--targets-file", str(tmp_path / "none.json")],
            1,
            "No such file",
        ),
        (
            ["ingest", "--store", store, "--target", "a:9400", "--interval", "abc"],
            2,
            "is not a number",
        ),
        (["ingest", "--store", store, "--target", "http://x:notaport/metrics"], 1, "bad port"),
        (
            ["ingest", "--store", store, "--target", "a:9400", "--timeout", "20"],
            1,
            "--timeout must be shorter",
        ),
        (
            ["serve", "--store", store, "--scrape-config", str(tmp_path / "none.yaml")],
            1,
            "--scrape-config",
        ),
        (
            ["serve", "--store", store, "--scrape-config", str(bad_yaml)],
            1,
            "timeout must be shorter than interval",
        ),
        (
            ["serve", "--store", store, "--accept-ingest", "--host", "0.0.0.0", "--allow-remote"],
            1,
            "without a token",
        ),
        (
            ["serve", "--store", store, "--accept-ingest", "--token-file", str(short)],
            1,
            "at least 16",
        ),
        (
            ["serve", "--store", store, "--accept-ingest", "--token-file", str(tmp_path / "x")],
            1,
            "--token-file",
        ),
    ]:
        r = cli(*args)
        assert r.returncode == code, (args, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and expected in lines[0], (args, r.stderr)


def test_an_empty_token_file_is_refused_not_taken_for_no_token(tmp_path: Path) -> None:
    """An empty --operator-token-file started the server read-only without a word (and an
    empty --token-file, open to all): each is one line naming the file, exit 1."""
    empty = tmp_path / "empty"
    empty.write_text("\n")
    store = str(tmp_path / "s.duckdb")
    serve = ("serve", "--store", store, "--accept-ingest", "--port", str(free_port()))
    for flag in ("--operator-token-file", "--token-file"):
        r = cli(*serve, flag, str(empty))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 1 and len(lines) == 1, (flag, r.stderr)
        assert flag in lines[0] and str(empty) in lines[0] and "empty" in lines[0], lines


def _counts(path: Path) -> dict[str, int]:
    from telemetry.store import Store

    with Store(str(path), read_only=True) as s:
        return {t: int(s.scalar(f"SELECT count(*) FROM {t}")) for t in ("gpu_samples", "runs")}


def test_every_command_refuses_a_store_another_process_owns_and_leaves_it_whole(
    tmp_path: Path,
) -> None:
    """A second `make demo`, a dashboard or a daemon pointed at a store a running process owns:
    one line naming the file, exit 1, and the owner's data is untouched (the demo used to
    delete the file before it found out)."""
    from telemetry.store import Store

    path = build_store(tmp_path / "owned.duckdb", days=0.05)
    before = _counts(path)
    port = str(free_port())
    with Store(str(path)) as owner:
        for args in [
            ["demo", "--store", str(path), "--port", port],
            ["serve", "--store", str(path), "--port", port],
            ["serve", "--store", str(path), "--port", port, "--accept-ingest"],
            ["ingest", "--store", str(path), "--target", "127.0.0.1:9", "--once"],
            ["summary", "--store", str(path)],
        ]:
            r = cli(*args)
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert r.returncode == 1, (args, r.stderr)
            assert len(lines) == 1 and "in use by another process" in lines[0], (args, r.stderr)
            assert str(path) in lines[0] and "Traceback" not in r.stderr
            assert path.exists(), f"{args[0]} removed the owned store"
        assert int(owner.scalar("SELECT count(*) FROM gpu_samples")) == before["gpu_samples"]
    assert _counts(path) == before


def test_a_port_in_use_is_one_line_before_the_store_is_touched(tmp_path: Path) -> None:
    import socket

    path = build_store(tmp_path / "s.duckdb", days=0.05)
    before = _counts(path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for args in [
            ["serve", "--store", str(path), "--port", port],
            ["demo", "--store", str(path), "--port", port],  # demo resets its store: not now
        ]:
            r = cli(*args)
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert r.returncode == 1, (args, r.stderr)
            assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], r.stderr
            assert "Address already in use" in lines[0], r.stderr
    assert _counts(path) == before
