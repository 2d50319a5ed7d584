"""The scrape source: dcgm-exporter targets, fetched every round, as ``Round`` batches.

Targets come from the command line (``ingest --target``, ``--targets-file``) or a scrape config
(``serve --scrape-config FILE``), which is YAML or JSON, either a Prometheus ``file_sd`` list or
a mapping::

    interval: 15          # seconds between rounds (default 15)
    timeout: 5            # per-target timeout, seconds (default 5)
    targets: [node001:9400, http://node002:9400/metrics]
    file_sd: [targets.json]   # file_sd files, relative to this file, re-read when they change

Its health rows are written with each round by the store's round sink (one per target URL,
with the sink's verdict: down, stale, samples stored); ``health()`` reports the same verdicts,
or the fetches' when the round was forwarded rather than stored here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from telemetry.collect.dcgm.scrape import (
    SCRAPE_INTERVAL_S,
    SCRAPE_TIMEOUT_S,
    TargetsFile,
    read_json_or_yaml,
    scrape_round,
)
from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import Batch, Health, Option, Round, SourceContext, SourceSpec, Written
from telemetry.ingest.targets import Target, normalise


class TargetSource:
    """Targets from the command line plus ``file_sd`` files re-read when they change. A file
    that turns bad keeps its last good list (with a warning), so a typo does not stop the loop."""

    def __init__(self, urls: list[str], files: list[str], log: Callable[[str], None]) -> None:
        self.fixed = [Target(normalise(u)) for u in urls]
        self.files = [TargetsFile(f) for f in files]
        self.log = log
        for f in self.files:
            f.targets()  # a missing or malformed file is an error at start, not later

    def targets(self) -> list[Target]:
        out = list(self.fixed)
        for f in self.files:
            try:
                out += f.targets()
            except (OSError, ValueError) as exc:
                self.log(f"targets file {f.path}: {exc}; keeping its last good list")
                out += f.last_good
        return list(dict.fromkeys(out))  # a target listed twice is scraped once


@dataclass
class ScrapeConfig:
    interval_s: float = SCRAPE_INTERVAL_S
    timeout_s: float = SCRAPE_TIMEOUT_S
    targets: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def load_scrape_config(path: str) -> ScrapeConfig:
    """Read a scrape config (see the module docstring); ValueError names what is wrong."""
    doc = read_json_or_yaml(path)
    if isinstance(doc, list):  # a bare file_sd list
        return ScrapeConfig(files=[path])
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping (interval, timeout, targets, file_sd)")
    unknown = set(doc) - {"interval", "timeout", "targets", "file_sd"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    cfg = ScrapeConfig()
    for key, attr in (("interval", "interval_s"), ("timeout", "timeout_s")):
        if key in doc:
            v = doc[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 86400:
                raise ValueError(f"{path}: {key} must be a positive number of seconds")
            setattr(cfg, attr, float(v))
    if cfg.timeout_s >= cfg.interval_s:
        raise ValueError(f"{path}: timeout must be shorter than interval")
    for key in ("targets", "file_sd"):
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ValueError(f"{path}: {key} must be a list of strings")
    cfg.targets = list(doc.get("targets", []))
    base = os.path.dirname(os.path.abspath(path))
    cfg.files = [os.path.join(base, f) for f in doc.get("file_sd", [])]
    if not cfg.targets and not cfg.files:
        raise ValueError(f"{path}: no targets and no file_sd files")
    return cfg


class ScrapeSource:
    name = "scrape"
    produces = (Round,)
    health_rows = False  # the round sink stores each target's row with the round

    def __init__(self, targets: TargetSource, interval_s: float, timeout_s: float) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._health: list[Health] = []
        self._last_up: dict[str, datetime] = {}

    def poll(self, now: datetime) -> list[Round]:
        return [Round(now, scrape_round(self.targets.targets(), self.timeout_s), self.interval_s)]

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if not isinstance(batch, Round):
            return
        frame = getattr(written.report, "health", None)
        verdicts: Iterable[tuple[Any, ...]]
        if frame is not None:  # stored here: the sink's verdict per target
            cols = ("target", "up", "error", "samples", "rejected_lines", "duration_s")
            verdicts = zip(*(frame[c] for c in cols), strict=True)
        else:  # forwarded (the server judges the samples), or not taken: then that is why
            failed = None if written.ok else written.error or "not stored"
            verdicts = (
                (f.target.url, not failed and f.error is None, failed or f.error, 0, 0)
                + (f.duration_s,)
                for f in batch.fetches
            )
        health = []
        for url, up, error, samples, rejected, duration in verdicts:
            if up:
                self._last_up[url] = now
            health.append(
                Health(
                    url,
                    bool(up),
                    None if up else str(error or "down"),
                    self._last_up.get(url),
                    int(samples),
                    int(rejected),
                    None if duration is None else float(duration),
                )
            )
        self._health = health

    def health(self) -> list[Health]:
        return list(self._health)


def build(values: Mapping[str, Any], ctx: SourceContext) -> ScrapeSource | None:
    if ctx.command == "serve":
        path = values.get("scrape_config")
        if not path:
            return None
        try:
            cfg = load_scrape_config(path)
            source = TargetSource(cfg.targets, cfg.files, ctx.log)
        except OSError as exc:
            raise FactoryFloorError(f"--scrape-config {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise FactoryFloorError(f"--scrape-config: {exc}") from None
        return ScrapeSource(source, cfg.interval_s, cfg.timeout_s)
    urls, file = values.get("target") or [], values.get("targets_file")
    if not urls and not file:
        return None
    try:
        source = TargetSource(urls, [file] if file else [], ctx.log)
    except OSError as exc:
        raise FactoryFloorError(f"{exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise FactoryFloorError(str(exc)) from None
    return ScrapeSource(source, ctx.interval_s, ctx.timeout_s)


SPEC = SourceSpec(
    name="scrape",
    summary="dcgm-exporter targets scraped every round (Prometheus text over HTTP)",
    options={
        "ingest": (
            Option(
                "--target",
                {
                    "action": "append",
                    "default": [],
                    "metavar": "URL",
                    "help": "host:9400 or http://host:9400/metrics (repeatable)",
                },
            ),
            Option(
                "--targets-file",
                {
                    "metavar": "FILE",
                    "help": "Prometheus file_sd JSON/YAML, re-read when it changes",
                },
            ),
        ),
        "serve": (
            Option(
                "--scrape-config",
                {
                    "metavar": "FILE",
                    "help": "scrape the dcgm-exporter targets in FILE from this process "
                    "(see README)",
                },
            ),
        ),
    },
    build=build,
    ask="--target or a --targets-file",
)
