"""Where ``factoryfloor serve`` listens: loopback only unless told otherwise, and on another
address only with ``--allow-remote``, where the token then guards pages and the ingest API.

The listening socket is read from the kernel's own table (``/proc/net/tcp``), not inferred
from which URL happens to answer."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import cli, free_port, start_server

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column
TOKEN = "bind-test-token-0123456789"


def listening(port: int) -> list[str]:
    """Local addresses (kernel hex: ``0100007F`` is 127.0.0.1) with a socket listening on
    ``port``, over IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, _, hex_port = local.partition(":")
            if state == LISTEN and int(hex_port, 16) == port:
                found.append(addr)
    return found


def _port(url: str) -> int:
    return int(urlsplit(url).port or 0)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None  # the 303 to /login is the answer under test


def _status(url: str, headers: dict[str, str]) -> tuple[int, str]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.headers.get("Location", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", "")


def test_serve_without_host_listens_on_loopback_only(dev_store: Path, tmp_path: Path) -> None:
    srv = start_server(["serve", "--store", str(dev_store)], tmp_path / "serve.log")
    try:
        assert listening(_port(srv.url)) == ["0100007F"]  # 127.0.0.1, and nothing else
    finally:
        srv.stop()


def test_remote_bind_needs_the_flag_and_ingest_there_needs_a_token(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    port = str(free_port())
    r = cli("serve", "--store", store, "--host", "0.0.0.0", "--port", port)
    assert r.returncode == 1 and "--allow-remote" in r.stderr, r.stderr
    r = cli(
        "serve", "--store", store, "--host", "0.0.0.0", "--allow-remote", "--accept-ingest",
        "--port", port,
    )  # fmt: skip
    assert r.returncode == 1 and "token" in r.stderr, r.stderr
    assert not Path(store).exists()  # refused before anything was created


def test_on_all_addresses_the_token_guards_pages_and_the_api(
    dev_store: Path, tmp_path: Path
) -> None:
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    args = ["serve", "--store", str(dev_store), "--host", "0.0.0.0", "--allow-remote"]
    srv = start_server([*args, "--token-file", str(tok)], tmp_path / "serve.log")
    html = {"Accept": "text/html"}
    try:
        assert listening(_port(srv.url)) == ["00000000"]  # 0.0.0.0: reachable from outside
        assert _status(srv.url + "/gpus", html) == (303, "/login?next=/gpus")
        assert _status(srv.url + "/api/v1/health", html)[0] == 401  # an API does not redirect
        for path in ("/gpus", "/api/v1/health"):
            wrong = {"Authorization": "Bearer wrong-token-0123456789"}
            assert _status(srv.url + path, wrong)[0] == 401, path
            right = {**html, "Authorization": f"Bearer {TOKEN}"}
            assert _status(srv.url + path, right)[0] == 200, path
    finally:
        srv.stop()
