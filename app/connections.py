"""Which connection the server closes to make room, so clients that only hold connections
(idle ones, and slow ones that send a request now and then) cannot fill the server's table.

Waitress stops accepting at its connection limit, and before this a page then waited in the
listen backlog until an idle connection timed out (60 s): 210 idle connections were enough.
Now each new connection is admitted at once, and makes room for itself:

* an address holding more than ``PER_ADDRESS`` connections loses its own connection idle the
  longest (one client cannot take the whole table, nor evict other clients to do it);
* over ``LIMIT - RESERVE`` connections in all, the connections idle the longest, whoever holds
  them, are closed (on each pass of the server's loop): the last ``RESERVE`` places stay free
  for the requests that are arriving.

Only a connection with nothing to answer can be chosen: idle between requests for over
``GRACE_S`` (a closed keep-alive connection costs a browser one reconnect; a connection just
opened, whose request the server has not read yet, is kept: a burst of 150 requests from one
address, each on a new connection, was otherwise answered 32), or still sending a request
begun more than ``SLOW_S`` ago. A request being answered is never cut; a new connection that finds
nothing to close is kept (the reserve holds it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

LIMIT = 500  # open connections in all; waitress accepts no more (the listen backlog holds them)
RESERVE = 50  # places kept free for new connections (over LIMIT - RESERVE, the idlest closes)
PER_ADDRESS = 32  # connections one client address keeps (a browser opens 6 per host)
SLOW_S = 5.0  # a request still arriving after this may be closed to make room
GRACE_S = 0.25  # a connection idle for less than this is kept (its request may be on its way)
IDLE_S = 20  # an idle connection is closed after this (the pages refresh every 10 s)
ACCEPT_BATCH = 64  # connections accepted in one pass of the server's loop


class Conn(Protocol):
    addr: Any
    requests: list[Any]
    total_outbufs_len: int
    will_close: bool
    last_activity: float
    reading_since: float | None


def _rank(c: Conn, now: float) -> tuple[int, float] | None:
    """How readily ``c`` is closed to make room (lowest first); None: it must stay."""
    if c.requests or c.total_outbufs_len or c.will_close:
        return None  # being answered
    if c.reading_since is None:  # idle: the longest idle first, but not one just opened
        return (0, c.last_activity) if c.last_activity < now - GRACE_S else None
    if c.reading_since < now - SLOW_S:
        return (1, c.reading_since)  # a request too slow to arrive: the oldest first
    return None


def _ranked(conns: Iterable[Conn], now: float) -> list[Conn]:
    """The connections that may be closed, the first to close first."""
    ranked = [(r, i, c) for i, c in enumerate(conns) if (r := _rank(c, now)) is not None]
    return [c for _, _, c in sorted(ranked, key=lambda t: (t[0], t[1]))]


def to_close(new: Conn, conns: list[Conn]) -> list[Conn]:
    """The connections of ``new``'s address to close now that ``new`` is admitted among
    ``conns`` (``new`` included): those over ``PER_ADDRESS``, as far as they may be closed."""
    host = new.addr[0] if new.addr else None
    same = [c for c in conns if c is not new and not c.will_close and c.addr
            and c.addr[0] == host]  # fmt: skip
    excess = len(same) + 1 - PER_ADDRESS
    return _ranked(same, time.time())[:excess] if excess > 0 else []


def over_reserve(conns: list[Conn], limit: int = LIMIT) -> list[Conn]:
    """The connections to close so that no more than ``limit - RESERVE`` stay open (fewer
    when not enough may be closed yet)."""
    staying = [c for c in conns if not c.will_close]
    excess = len(staying) - (limit - RESERVE)
    return _ranked(staying, time.time())[:excess] if excess > 0 else []
