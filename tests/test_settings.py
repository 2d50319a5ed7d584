"""The settings table: every setting has a default and help, the parser takes both from it,
and the environment is read in one place when asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import settings as st
from app.cli import build_parser
from app.settings import Settings
from telemetry import env
from telemetry.collect.dcgm.scrape import SCRAPE_INTERVAL_S, SCRAPE_TIMEOUT_S
from telemetry.collect.dcgm.scrape_source import load_scrape_config
from telemetry.errors import FactoryFloorError


def test_every_setting_has_a_default_and_help() -> None:
    rows = st.table()
    assert len(rows) == len({name for name, _, _ in rows}) > 30
    for name, _default, text in rows:
        assert text and "{" not in text, name


def test_the_parser_takes_defaults_from_the_settings(tmp_path: Path) -> None:
    line = ["ingest", "--store", "s", "--target", "a:1"]
    ingest = Settings.from_args(build_parser().parse_args(line))
    assert (ingest.interval_s, ingest.timeout_s) == (SCRAPE_INTERVAL_S, SCRAPE_TIMEOUT_S) == (15, 5)
    assert ingest.sources["scrape"] == {"target": ["a:1"], "targets_file": None}
    cfg = tmp_path / "scrape.yaml"
    cfg.write_text("targets: [a:9400]\n")
    loaded = load_scrape_config(str(cfg))
    assert (loaded.interval_s, loaded.timeout_s) == (SCRAPE_INTERVAL_S, SCRAPE_TIMEOUT_S)
    demo = Settings.from_args(build_parser().parse_args(["demo"]))
    assert (demo.store, demo.scenario, demo.prefill_hours) == (st.DEMO_STORE, "dev-64", 20.0)
    replay = Settings.from_args(
        build_parser().parse_args(["replay", "--scenario", "dev-64", "--interval", "30"])
    )
    assert replay.sample_interval_s == 30.0 and replay.interval_s == SCRAPE_INTERVAL_S


def test_the_environment_is_read_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(env.STATE_HOME, str(tmp_path))
    spool = tmp_path / "factoryfloor" / "spool"
    assert Settings().spool == str(spool)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ingest", "--help"])
    assert str(spool) in "".join(capsys.readouterr().out.split())  # wrapped anywhere
    monkeypatch.setenv(env.TOKEN, "  a-token-of-enough-length  ")
    assert Settings().token() == "a-token-of-enough-length"
    monkeypatch.setenv(env.TOKEN, "short")
    with pytest.raises(FactoryFloorError, match="at least 16 printable"):
        Settings().token()
    token_file = tmp_path / "token"
    token_file.write_text("from-the-file-0123456789\n")
    assert Settings(token_file=str(token_file)).token() == "from-the-file-0123456789"
    monkeypatch.setenv(env.OPERATOR_TOKEN, "operator-token-0123456789")
    assert Settings().operator_token() == "operator-token-0123456789"
    assert set(env.VARIABLES) == {
        env.STATE_HOME, env.TOKEN, env.OPERATOR_TOKEN, env.MALLOC_TRIM, env.REPLY_CACHE,
        env.RESULT_CACHE, env.SQL_AUDIT, env.CHECK_FIGURES, env.REQUEST_READ_S,
    }  # fmt: skip
