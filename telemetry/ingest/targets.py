"""What a scrape round carries: each ``Target`` (an exporter's address and its labels) and
the ``Fetch`` that asking it gave (its page, or why it is down). Every source that yields GPU
samples hands over rounds of these (``seam.Round``): the dcgm-exporter scrape, the Prometheus
regrouper, a forwarded round; the round sink reads them. With the address rule for targets
(``normalise``) and the User-Agent our fetches send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^[0-9A-Fa-f:.]+$")
USER_AGENT = "factoryfloor-ingest/0.1"


@dataclass(frozen=True)
class Target:
    url: str  # http://host:9400/metrics
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def host(self) -> str:
        """The target's host name, used when a scrape carries no ``Hostname`` label."""
        netloc = self.url.split("://", 1)[-1].split("/", 1)[0]
        return netloc.rsplit(":", 1)[0] if ":" in netloc else netloc


@dataclass(frozen=True)
class Fetch:
    target: Target
    text: str | None  # the body, None on error
    error: str | None  # why the target is down, in words
    duration_s: float
    status: int | None = None


def normalise(address: str) -> str:
    """``host:9400`` -> ``http://host:9400/metrics``; a full URL is kept. Raises ValueError for
    anything that is not an http(s) address."""
    a = address.strip()
    if not a or any(c.isspace() for c in a) or len(a) > 2048:
        raise ValueError(f"not a scrape target: {address[:80]!r}")
    if "://" not in a:
        a = f"http://{a}"
    scheme = a.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) target: {address[:80]!r}")
    rest = a.split("://", 1)[1]
    if "/" not in rest:
        a += "/metrics"
    parts = urlsplit(a)
    try:
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise ValueError(f"bad port in target {address[:80]!r}") from None
    if not parts.hostname or not _HOST.match(parts.hostname):
        raise ValueError(f"bad host in target {address[:80]!r}")
    return a
