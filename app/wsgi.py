"""The production WSGI server the dashboard and the ingest API are served by: waitress.

Werkzeug's development server starts a thread per connection with no cap, and a client that
sends its headers or body a byte a second holds that thread for as long as it likes (eight such
clients held every ingest write slot). Waitress reads requests on one asynchronous loop and
hands a request to its fixed pool of worker threads only once it has arrived whole, so a slow
client holds a connection, never a worker. On top of waitress's own limits (``LIMITS``: worker
threads, open connections, idle connections closed, header and body sizes) a request that is
still arriving ``REQUEST_READ_S`` after its first byte is cut off: a drip-fed body or header
cannot hold a connection for ever either.

A body the endpoint would refuse is not read at all: when a request declares more than its
path takes (``body_limit``), or sends a chunked body with no length, waitress hands it over at
the end of its headers with no body and closes the connection after the answer, so the app
answers 413 or 411 in JSON at once, as it did before a byte of the body was read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from telemetry import env

REQUEST_READ_S = 60.0  # a whole request, headers and body, must arrive within this
# Waitress's own bounds. The header limit is above the app's (``guard.MAX_HEADER_BYTES``) so an
# oversized header gets the app's JSON reason; the body limit is the largest any endpoint takes
# (a forwarded round, 64 MiB), each endpoint checking its own below it.
LIMITS: dict[str, Any] = {
    "threads": 8,  # requests served at once; the rest queue (callbacks are short)
    "connection_limit": 200,  # open connections; more wait in the listen backlog
    "channel_timeout": 60,  # an idle connection is closed after this, seconds
    "cleanup_interval": 5,  # how often idle and slow connections are looked for, seconds
    "max_request_header_size": 1 * 2**20,
    "max_request_body_size": 64 * 2**20 + 1,
    "backlog": 1024,
    "ident": "factoryfloor",
}


def _parser(body_limit: Callable[[str], int]) -> type[HTTPRequestParser]:
    class _Parser(HTTPRequestParser):  # type: ignore[misc]
        def parse_header(self, header_plus: bytes) -> None:
            super().parse_header(header_plus)
            if self.chunked or self.content_length > body_limit(self.path or "/"):
                # the app answers from the headers alone (411 with no length, 413 over it)
                self.body_rcv, self.chunked, self.content_length = None, False, 0
                self.connection_close = True  # the unread body must not be read as a request

    return _Parser


class _Channel(HTTPChannel):
    """A connection that remembers when the request it is reading began."""

    reading_since: float | None = None

    def received(self, data: bytes) -> bool:
        if self.request is None:
            self.reading_since = None
        done = super().received(data)
        if self.request is None:
            self.reading_since = None
        elif self.reading_since is None:
            self.reading_since = time.time()
        return bool(done)


class _Server(TcpWSGIServer):  # type: ignore[misc]
    channel_class = _Channel

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        cutoff = now - env.request_read_s(REQUEST_READ_S)
        for channel in list(self.active_channels.values()):
            since = getattr(channel, "reading_since", None)
            if since is not None and since < cutoff:
                channel.will_close = True


def serve(
    app: Any, host: str, port: int, body_limit: Callable[[str], int] | None = None,
    **overrides: Any,
) -> None:  # fmt: skip
    """Serve the WSGI ``app`` on ``host:port`` until KeyboardInterrupt (SIGTERM is turned
    into one by ``serve``); OSError when the address cannot be bound. ``body_limit(path)``:
    the most a request to ``path`` may declare before the app refuses it unread."""
    adj = Adjustments(host=host, port=port, **{**LIMITS, **overrides})
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    socket_map: dict[int, Any] = {}
    channel = _Channel
    if body_limit is not None:
        channel = type("_LimitedChannel", (_Channel,), {"parser_class": _parser(body_limit)})
    server = None
    for sockinfo in adj.listen:
        server = _Server(app, socket_map, dispatcher=dispatcher, adj=adj, sockinfo=sockinfo)
        server.channel_class = channel
    assert server is not None
    server.run()  # returns on KeyboardInterrupt, after the workers stopped
