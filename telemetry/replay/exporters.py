"""The replay engine as a fleet of NVIDIA dcgm-exporter endpoints on 127.0.0.1.

``ExporterFarm``: one asyncio event loop with one listening socket per host (``/metrics``,
``/health``), paced live at a speed. A node in repair refuses connections (it is powered off
or rebooting) or, with ``repair="503"``, answers 503 like an exporter that lost its GPUs.
What each host shows comes from an ``ExporterSimulation`` (``exporter_sim``), printed as the
exporter prints it (``exporter_text``); this module only serves it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
from collections.abc import Callable

from telemetry.errors import FactoryFloorError
from telemetry.replay.exporter_sim import ExporterSimulation


class ExporterError(FactoryFloorError):
    """An exporter endpoint could not be served (port in use, too many ports)."""


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_HEAD = 16384


class _Protocol(asyncio.Protocol):
    """HTTP/1.x for one host's endpoint: GET/HEAD, keep-alive, no request bodies."""

    def __init__(self, farm: ExporterFarm, node: int) -> None:
        self.farm, self.node, self.buf = farm, node, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.farm._conns[self.node].add(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.farm._conns[self.node].discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None and not self.transport.is_closing():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self._send(431, b"HTTP/1.1", b"GET", "text/plain", b"", False)
                return
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._send(400, b"HTTP/1.1", b"GET", "text/plain", b"bad request\n", False)
            return
        method, target, version = parts
        conn = b""
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"connection":
                conn = value.strip().lower()
        keep = conn != b"close" if version == b"HTTP/1.1" else conn == b"keep-alive"
        if method not in (b"GET", b"HEAD"):
            self._send(405, version, method, "text/plain", b"method not allowed\n", False)
            return
        path = target.split(b"?", 1)[0].decode("latin-1")
        status, ctype, body = self.farm.respond(self.node, path)
        self._send(status, version, method, ctype, body, keep)

    def _send(
        self, status: int, version: bytes, method: bytes, ctype: str, body: bytes, keep: bool
    ) -> None:
        assert self.transport is not None
        head = (
            f"{version.decode()} {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep else 'close'}"
            "\r\n\r\n"
        ).encode()
        self.transport.write(head if method == b"HEAD" else head + body)
        if not keep:
            self.transport.close()


class ExporterFarm:
    """Every host of an ``ExporterSimulation`` as a dcgm-exporter on its own port.

    ``base_port`` N gives host i port N + i; 0 lets the OS pick a free port per host (see
    ``ports`` after ``start``). One event loop serves every socket; call the coroutines from it.
    """

    def __init__(
        self,
        sim: ExporterSimulation,
        base_port: int = 9400,
        host: str = "127.0.0.1",
        repair: str = "refuse",
    ) -> None:
        if repair not in ("refuse", "503"):
            raise ValueError(f"repair must be 'refuse' or '503', not {repair!r}")
        if base_port and base_port + sim.n_hosts - 1 > 65535:
            raise ExporterError(
                f"base port {base_port}: {sim.n_hosts} nodes need ports up to "
                f"{base_port + sim.n_hosts - 1} (the last TCP port is 65535)"
            )
        self.sim, self.host, self.repair = sim, host, repair
        self.ports = [base_port + i if base_port else 0 for i in range(sim.n_hosts)]
        self.requests = 0
        self._servers: dict[int, asyncio.Server] = {}
        self._conns: list[set[asyncio.Transport]] = [set() for _ in range(sim.n_hosts)]

    def respond(self, node: int, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET on ``path`` of ``node``'s exporter."""
        self.requests += 1
        text = self.sim.render(node) if path == "/metrics" else None
        up = not self.sim.down(node)
        if path == "/metrics":
            return (200, _METRICS_TYPE, text.encode()) if text else (503, "text/plain", b"")
        if path == "/health":
            return (200, "text/plain", b"OK") if up else (503, "text/plain", b"KO")
        return 404, "text/plain; charset=utf-8", b"404 page not found\n"

    async def _listen(self, node: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.ports[node]))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ExporterError(
                f"cannot listen on {self.host}:{self.ports[node]} for {self.sim.hostnames[node]}:"
                f" {exc.strerror or exc}"
            ) from None
        self.ports[node] = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._servers[node] = await loop.create_server(lambda: _Protocol(self, node), sock=sock)

    def _unlisten(self, node: int) -> None:
        self._servers.pop(node).close()
        for tr in list(self._conns[node]):
            tr.abort()  # the node went away: open keep-alive connections are reset

    async def start(self) -> None:
        """Open one listening socket per host, then close those of hosts in repair."""
        _raise_fd_limit(2 * self.sim.n_hosts + 256)
        try:
            for node in range(self.sim.n_hosts):
                await self._listen(node)
        except ExporterError:
            await self.close()
            raise
        await self.sync()

    async def sync(self) -> None:
        """Match listeners to node states: a node in repair refuses connections (in "refuse"
        mode); a repaired node listens again. A port taken meanwhile is retried next tick."""
        if self.repair != "refuse":
            return
        for node in range(self.sim.n_hosts):
            down, listening = self.sim.down(node), node in self._servers
            if down and listening:
                self._unlisten(node)
            elif not down and not listening:
                try:
                    await self._listen(node)
                except ExporterError:
                    pass

    async def step_to(self, t_s: float) -> int:
        """Advance the simulation to ``t_s`` simulated seconds; returns the ticks synthesised."""
        n = self.sim.advance_to(t_s)
        await self.sync()
        return n

    async def run(self, speed: float, stop: asyncio.Event | None = None) -> None:
        """Advance live at ``speed`` simulated seconds per wall second until the run ends or
        ``stop`` is set; if synthesis falls behind, the next step catches up."""
        if not speed > 0:
            raise ValueError("speed must be positive (simulated seconds per wall second)")
        loop, stop = asyncio.get_running_loop(), stop or asyncio.Event()
        wall0, sim0 = loop.time(), self.sim.t
        while not self.sim.done and not stop.is_set():
            due = wall0 + (self.sim.t + self.sim.interval_s - sim0) / speed
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(due - loop.time(), 0.0))
            except TimeoutError:
                await self.step_to(sim0 + (loop.time() - wall0) * speed)

    async def close(self) -> None:
        for node in list(self._servers):
            self._unlisten(node)

    def targets(self) -> list[dict[str, object]]:
        """Prometheus ``file_sd`` groups: every host, reachable or in repair."""
        labels = {
            "scenario": self.sim.sc.name,
            "run_id": self.sim.run_id,
            "simulated": "true",
        }
        return [{"targets": [f"{self.host}:{p}" for p in self.ports], "labels": labels}]

    def write_targets(self, path: str) -> None:
        """Write ``targets()`` as file_sd JSON atomically (a reader never sees half a file)."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.targets(), fh, indent=1)
        os.replace(tmp, path)


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(top, soft), hard))


def serve_exporters(
    farm: ExporterFarm,
    speed: float,
    targets_file: str | None = None,
    ready: Callable[[ExporterFarm], None] | None = None,
) -> None:
    """Serve ``farm`` live at ``speed`` until the run ends, SIGINT or SIGTERM (blocking). Once
    every host listens, ``ready`` is called, then ``targets_file`` is written (so its appearance
    tells a scraper that everything is up)."""
    asyncio.run(_serve(farm, speed, targets_file, ready))


async def _serve(
    farm: ExporterFarm,
    speed: float,
    targets_file: str | None,
    ready: Callable[[ExporterFarm], None] | None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError):  # not the main thread
            pass
    await farm.start()
    try:
        if ready is not None:
            ready(farm)
        if targets_file:
            farm.write_targets(targets_file)
        await farm.run(speed, stop)
    finally:
        await farm.close()
