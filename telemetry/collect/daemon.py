"""The scrape loop shared by ``factoryfloor ingest`` and ``factoryfloor serve --scrape-config``.

Every ``interval`` seconds (on a fixed schedule, not interval-after-the-last-round) it fetches
every target and hands the round to a handler: the store sink (direct or in the server) or the
forwarder (daemon with ``--server``). A round that overruns the interval is reported and the
schedule skips ahead rather than piling rounds up.

A scrape config (``serve --scrape-config FILE``) is YAML or JSON, either a Prometheus
``file_sd`` list or a mapping::

    interval: 15          # seconds between rounds (default 15)
    timeout: 5            # per-target timeout, seconds (default 5)
    targets: [node001:9400, http://node002:9400/metrics]
    file_sd: [targets.json]   # file_sd files, relative to this file, re-read when they change
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from telemetry.collect.scrape import (
    Fetch,
    Target,
    TargetsFile,
    normalise,
    read_json_or_yaml,
    scrape_round,
)


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
    interval_s: float = 15.0
    timeout_s: float = 5.0
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


def run_rounds(
    source: TargetSource,
    handle: Callable[[datetime, list[Fetch]], str],
    interval_s: float,
    timeout_s: float,
    stop: threading.Event,
    log: Callable[[str], None],
    once: bool = False,
) -> int:
    """Scrape on a fixed schedule until ``stop`` is set (or one round with ``once``); each
    round's handler returns a line for the log. Returns the number of rounds run."""
    rounds = 0
    next_at = time.monotonic()
    while not stop.is_set():
        ts = datetime.utcnow()
        fetches = scrape_round(source.targets(), timeout_s)
        try:
            line = handle(ts, fetches)
        except Exception as exc:  # the loop outlives a bad round; the handler said why
            line = f"round at {ts:%H:%M:%S} not stored: {exc}"
        log(line)
        rounds += 1
        if once:
            break
        next_at += interval_s
        late = time.monotonic() - next_at
        if late > 0:
            skipped = int(late // interval_s) + 1
            log(
                f"WARNING: the round took {interval_s + late:.1f} s, longer than the "
                f"{interval_s:g} s interval; skipping {skipped} round(s)"
            )
            next_at += skipped * interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))
    return rounds
