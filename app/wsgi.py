"""The production WSGI server the dashboard and the ingest API are served by: waitress.

Werkzeug's development server starts a thread per connection with no cap, and a client that
sends its headers or body a byte a second holds that thread for as long as it likes (eight such
clients held every ingest write slot). Waitress reads requests on one asynchronous loop and
hands a request to its fixed pool of worker threads only once it has arrived whole, so a slow
client holds a connection, never a worker. On top of waitress's own limits (``LIMITS``: worker
threads, open connections, idle connections closed, header and body sizes) a request that is
still arriving ``REQUEST_READ_S`` after its first byte is cut off: a drip-fed body or header
cannot hold a connection for ever either. Clients that only hold connections cannot fill them:
each new connection makes room for itself (``app.connections``).

A body the endpoint would refuse is not kept: when a request declares more than its path
takes (``body_limit``), waitress hands it to the app at the end of its headers with no body,
so the app answers 413 in JSON at once, and the bytes that follow are discarded as they come
(a client still sending them then reads the answer, not a reset); a chunked body (no length)
is answered 411 the same way and the connection closed after.
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

from app import connections
from telemetry import env

REQUEST_READ_S = 60.0  # a whole request, headers and body, must arrive within this
# Waitress's own bounds. The header limit is above the app's (``guard.MAX_HEADER_BYTES``) so an
# oversized header gets the app's JSON reason; the body limit is the largest any endpoint takes
# (a forwarded round, 64 MiB), each endpoint checking its own below it.
LIMITS: dict[str, Any] = {
    "threads": 8,  # requests served at once; the rest queue (callbacks are short)
    "connection_limit": connections.LIMIT,  # open connections; more wait in the backlog
    "channel_timeout": connections.IDLE_S,  # an idle connection is closed after this, seconds
    "cleanup_interval": 5,  # how often idle and slow connections are looked for, seconds
    "max_request_header_size": 1 * 2**20,
    "max_request_body_size": 64 * 2**20 + 1,
    "backlog": 1024,
    "ident": "factoryfloor",
    "asyncore_use_poll": True,  # select() fails past file descriptor 1024
}


def _parser(body_limit: Callable[[str], int]) -> type[HTTPRequestParser]:
    class _Parser(HTTPRequestParser):  # type: ignore[misc]
        unread = 0  # body bytes declared and not read: the channel discards them

        def parse_header(self, header_plus: bytes) -> None:
            super().parse_header(header_plus)
            refused = self.chunked or self.content_length > body_limit(self.path or "/")
            if refused and self.expect_continue:  # the client waits for "100 Continue" or
                self._refuse_unsent()  # an answer before it sends the body: answer now
            elif self.chunked:  # the app answers 411; the chunks' end is not sought
                self.body_rcv, self.chunked, self.connection_close = None, False, True
            elif refused:  # the app answers 413
                self.unread, self.content_length, self.body_rcv = self.content_length, 0, None

        def _refuse_unsent(self) -> None:
            # No "100 Continue" (waitress would send it, then read the body as the next
            # request's headers): the app answers from the headers, and the connection closes
            # after, as the body that may still come is not read (RFC 9110, 10.1.1).
            self.expect_continue, self.body_rcv, self.chunked = False, None, False
            self.content_length = 0
            self.headers["CONNECTION"] = "close"

        def received(self, data: bytes) -> int:
            n = int(super().received(data))
            if self.completed and self.unread and n < len(data):  # body bytes after the head
                take = min(len(data) - n, self.unread)
                self.unread -= take
                return n + take
            return n

    return _Parser


class _Channel(HTTPChannel):
    """A connection that remembers when the request it is reading began, and discards the
    body of a request answered from its headers (so the client, still sending it, reads the
    answer instead of a reset, and the connection stays in step for the next request)."""

    reading_since: float | None = None
    discarding: Any = None  # the parser whose declared body is being discarded
    close_after_discard = False  # the answer is sent; close once the body is discarded

    def __init__(self, server: Any, *args: Any, **kw: Any) -> None:
        super().__init__(server, *args, **kw)
        server.accepted = self  # for the server to make room for it

    def _lingering(self) -> bool:
        d = self.discarding
        return bool(d is not None and d.unread and not self.will_close)

    def readable(self) -> bool:
        return bool(self._lingering() and not self.requests) or bool(super().readable())

    def writable(self) -> bool:
        if self.close_after_discard and not self.total_outbufs_len:
            return False  # nothing to send while the body is discarded: no busy loop
        return bool(super().writable())

    def handle_write(self) -> None:
        if self.close_when_flushed and self._lingering():  # closing now would reset the
            self.close_when_flushed, self.close_after_discard = False, True  # client's send
        super().handle_write()

    def received(self, data: bytes) -> bool:
        if self.discarding is not None and self.discarding.unread:
            take = min(len(data), self.discarding.unread)
            self.discarding.unread -= take
            self.last_activity = time.time()
            data = data[take:]
            if not self.discarding.unread and self.close_after_discard:
                self.close_after_discard, self.will_close = False, True
            if not data or self.will_close:
                return True
        self.discarding = None
        if self.request is None:
            self.reading_since = None
        done = super().received(data)
        for req in self.requests:
            if getattr(req, "unread", 0):
                self.discarding = req
                self.reading_since = self.reading_since or time.time()
        if self.request is None and self.discarding is None:
            self.reading_since = None
        elif self.reading_since is None:
            self.reading_since = time.time()
        return bool(done)


class _Server(TcpWSGIServer):  # type: ignore[misc]
    channel_class = _Channel
    accepted: _Channel | None = None  # the connection just accepted

    def handle_accept(self) -> None:
        # Every waiting connection, not one a loop pass as waitress does: a pass costs a call
        # per open connection, and clients reconnecting as fast as they are closed would
        # otherwise queue a new visitor behind them in the listen backlog.
        for _ in range(connections.ACCEPT_BATCH):
            if len(self._map) >= self.adj.connection_limit:
                return
            self.accepted = None
            super().handle_accept()  # the new channel sets ``accepted``
            if self.accepted is None:
                return  # nothing waiting (or a connection that failed at once)
            # Closed on the loop's next pass, not now: a descriptor, reused at once by the
            # next accept, would get the events this pass polled for the closed connection.
            for old in connections.to_close(self.accepted, list(self.active_channels.values())):
                old.will_close = True

    def readable(self) -> bool:
        # Asked once a pass of the loop, before it polls: room is made here, past the reserve
        # (a connection just opened may not be closed yet, so an accept cannot always do it).
        if len(self.active_channels) > connections.LIMIT - connections.RESERVE:
            for old in connections.over_reserve(list(self.active_channels.values())):
                old.will_close = True
        return bool(super().readable())

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
