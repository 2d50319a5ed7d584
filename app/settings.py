"""Every setting of the ``factoryfloor`` command in one table: ``Settings``.

Each field carries its default and its help text (``setting``), the one place either is
defined: the parser (``app.cli``) takes both from here, fills one ``Settings`` at the entry
point and hands it to the command, which passes it down instead of a dozen parameters. A
command may show a field under another flag (``replay --interval`` is ``sample_interval_s``,
``ingest --interval`` is ``interval_s``) or with its own default (``demo --store``). The values
of the registered sources' options (``telemetry.sources``) ride along in ``sources``. The
environment is read by ``telemetry.env`` only.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, dataclass, field, fields
from datetime import datetime
from typing import Any

from telemetry import env, sources
from telemetry.collect.dcgm.scrape import SCRAPE_INTERVAL_S, SCRAPE_TIMEOUT_S
from telemetry.cost import PriceBook, price_book
from telemetry.errors import FactoryFloorError

DEMO_STORE = "factoryfloor-demo.duckdb"
DEMO_SCENARIO = "dev-64"
DEMO_PREFILL_H = 20.0
LIVE_SPEED = 1.0  # what a serving process replays at unless told (simulated s per wall s)
EXPORTER_BASE_PORT = 9400  # dcgm-exporter's own port: node i of a simulated farm is 9400+i
SPOOL_MAX_MB = 2048.0
MIN_TOKEN_CHARS = 16


def setting(default: Any, help: str, *, factory: Any = None) -> Any:
    """A field with its default and help text (``{default}`` in the text is the default)."""
    meta = {"help": help}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    command: str = setting("", "the subcommand")
    # -- the store and the dashboard ------------------------------------------------------
    store: str | None = setting(None, "DuckDB store file")
    host: str = setting("127.0.0.1", "bind address (default {default})")
    port: int = setting(8050, "TCP port (default {default})")
    allow_remote: bool = setting(False, "required to bind an address other than loopback")
    token_file: str | None = setting(
        None,
        f"access token (file with one line; or set {env.TOKEN}): serve requires it of the "
        "dashboard and the ingest API, ingest sends it; never on the command line, where `ps` "
        "shows it",
    )
    operator_token_file: str | None = setting(
        None,
        f"operator token (file with one line; or set {env.OPERATOR_TOKEN}): allows correcting "
        "an interruption's cause on the Failures page and POST /api/v1/interruptions/label; "
        "without it the dashboard is read-only",
    )
    json: bool = setting(False, "machine-readable output")
    # -- jobs (``jobs``, ``summary``'s ``jobs``) -------------------------------------------------
    day: str | None = setting(None, "the UTC day YYYY-MM-DD whose jobs are written")
    csv: str | None = setting(None, "CSV file to write ('-': standard output, the default)")
    jobs_days: float = setting(
        7.0,
        "summary's jobs: those that ran in the last N days of the store's data (default {default})",
    )
    # -- the replay engine ----------------------------------------------------------------
    scenario: str | None = setting(None, "see `scenarios`")
    seed: int = setting(0, "random seed (default {default})")
    sample_interval_s: float | None = setting(None, "per-GPU sample interval, seconds")
    start: datetime | None = setting(
        None,
        "simulated start time (ISO, UTC); default: now for a live replay (--speed), else the "
        "scenario's own start (2026-01-05 00:00 UTC: a backfill is dated there, not today)",
    )
    days: float | None = setting(None, "override the scenario's duration")
    nodes: int | None = setting(
        None,
        "override the scenario's job nodes (a larger or smaller fleet; its hot spares and the "
        "lemon nodes that exist stay)",
    )
    nvme_interval_s: float | None = setting(None, "NVMe checkpoint interval")
    pfs_every: int | None = setting(None, "copy every Nth NVMe checkpoint to the PFS")
    object_every: int | None = setting(None, "copy every Nth PFS checkpoint to objects")
    backfill: bool = setting(False, "as fast as possible (default)")
    speed: float | None = setting(None, "live: simulated seconds per wall second")
    prefill_hours: float = setting(
        0.0, "simulated hours backfilled before going live (default {default:g})"
    )
    no_progress: bool = setting(False, "no progress bar")
    serve_exporters: bool = setting(
        False,
        "serve every simulated node as a dcgm-exporter on 127.0.0.1 (/metrics, /health); "
        "streams live (--speed defaults to 1, --interval to min(scenario's, 30 s)), "
        "--store optional",
    )
    exporter_base_port: int | None = setting(
        None, f"node i listens on PORT+i (default {EXPORTER_BASE_PORT}; 0: any free ports)"
    )
    exporter_targets_file: str | None = setting(
        None, "write the endpoints as Prometheus file_sd JSON"
    )
    # -- ingest ---------------------------------------------------------------------------
    accept_ingest: bool = setting(
        False, "accept forwarded scrape rounds, training metrics and run events on /api/v1/"
    )
    rw_interval_s: float = setting(
        15.0,
        "remote_write: the senders' scrape interval, seconds, the grid their samples are cut "
        "into rounds on (default {default:g}); a faster sender loses nothing, it makes more "
        "rounds",
    )
    rw_max_age_s: float = setting(
        7 * 86400.0,
        "remote_write: refuse samples older than this behind the server's clock (a duration; "
        "default 7d)",
    )
    rw_max_future_s: float = setting(
        600.0,
        "remote_write: refuse samples stamped this far ahead of the server's clock (a "
        "duration; default 10m)",
    )
    allowed_hosts: list[str] = setting(
        None,
        "host names the server answers to besides its bound address's (repeatable): a "
        "request with any other Host header is refused (DNS rebinding)",
        factory=list,
    )
    ingest_into_replay: bool = setting(
        False,
        "load tests: let scrapes of a replay's own simulated exporters land in its store "
        "(it stays marked simulated)",
    )
    server: str | None = setting(
        None, "forward rounds to `factoryfloor serve --accept-ingest` at URL, spooling on disk"
    )
    spool: str = setting(
        None,
        "--server: on-disk spool for undelivered rounds (default {default})",
        factory=env.default_spool,
    )
    spool_max_mb: float = setting(
        SPOOL_MAX_MB,
        "--server: spool size bound; when full new rounds are dropped with a warning",
    )
    interval_s: float = setting(SCRAPE_INTERVAL_S, "seconds between rounds (default {default:g})")
    timeout_s: float = setting(
        SCRAPE_TIMEOUT_S, "per-target timeout, seconds (default {default:g})"
    )
    once: bool = setting(False, "one round, then exit")
    raw_retention: float | None = setting(
        None,
        "keep per-GPU samples this long (a duration: 7d, 36h; 0: until their rollups close, "
        "for a TSDB beside the store, docs/scaling.md) and the rollups for ever; older "
        "raw samples leave the store in the background (default: kept for ever)",
    )
    gpu_hour_price: float | None = setting(
        None,
        "USD per GPU-hour for the money figures (lost GPU-hours, checkpoint stalls, what-if); "
        "default 2.00, an assumption every figure says it used",
    )
    kwh_price: float | None = setting(None, "USD per kWh for the energy cost (default 0.10)")
    run_price: list[str] = setting(
        None,
        "a run's own prices, RUN=USD_PER_GPU_HOUR[/USD_PER_KWH] (repeatable)",
        factory=list,
    )
    alerts_file: str | None = setting(
        None,
        "deliver the Overview's alerts to the receivers this TOML file configures "
        "(Alertmanager, signed webhooks; grouping, repeat interval; see README)",
    )
    actions_file: str | None = setting(
        None,
        "override the rules that recommend what to do about each interruption (drain, "
        "restart, page, investigate) with this TOML file (telemetry/reference/actions.toml "
        "is the shipped table and its format)",
    )
    history_days: float | None = setting(
        None, "a node's culprit history spans this many days of the store's data (default 14)"
    )
    min_culprit: int | None = setting(
        None, "list nodes named the culprit at least this many times (default 2)"
    )
    # -- the registered sources' options (telemetry.sources), per source name -------------
    sources: dict[str, dict[str, Any]] = setting(None, "source options", factory=dict)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        """The settings a parsed command line gives; fields it does not name keep defaults."""
        given = vars(args)
        own = {f.name: given[f.name] for f in fields(cls) if f.name in given}
        return cls(**own, sources=sources.values(args.command, given))

    def token(self) -> str | None:
        """The access token, from ``token_file`` or the environment (None: no token);
        FactoryFloorError for an unreadable file or a token too short to be one."""
        return _read_token(self.token_file, "--token-file", env.token())

    def prices(self) -> PriceBook:
        """The price book of the money figures; FactoryFloorError for a malformed --run-price."""
        try:
            return price_book(self.gpu_hour_price, self.kwh_price, self.run_price)
        except ValueError as exc:
            raise FactoryFloorError(str(exc)) from None

    def operator_token(self) -> str | None:
        """The operator token (corrections), from its file or the environment (None: none)."""
        return _read_token(self.operator_token_file, "--operator-token-file", env.operator_token())


def _read_token(path: str | None, flag: str, from_env: str) -> str | None:
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                tok = fh.read().strip()
        except OSError as exc:
            raise FactoryFloorError(f"{flag} {path}: {exc.strerror}") from None
        if not tok:  # not "no token": an empty file is a mistake, never read-only/open
            raise FactoryFloorError(f"{flag} {path}: the file is empty")
    else:
        tok = from_env
    if tok and (len(tok) < MIN_TOKEN_CHARS or not tok.isprintable()):
        raise FactoryFloorError(
            f"the token must be at least {MIN_TOKEN_CHARS} printable characters"
        )
    return tok or None


def default(name: str) -> Any:
    """The default of field ``name``."""
    f = _field(name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def help_text(name: str, default_value: Any = MISSING) -> str:
    """Field ``name``'s help, ``{default}`` filled with ``default_value`` (or its default)."""
    value = default(name) if default_value is MISSING else default_value
    return str(_field(name).metadata["help"]).format(default=value)


def table() -> list[tuple[str, Any, str]]:
    """(name, default, help) of every setting: the settings table."""
    return [(f.name, default(f.name), help_text(f.name)) for f in fields(Settings)]


def _field(name: str) -> Field[Any]:
    for f in fields(Settings):
        if f.name == name:
            return f
    raise KeyError(name)
