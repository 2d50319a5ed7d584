"""What a scrape's HTTP exchange refuses, in words: ``Down`` (the target is down for the reason
given), and ``Inflater`` (a gzip body inflated piece by piece, never past the size limit, so a
gzip bomb is a target down, not memory exhausted). Used by ``telemetry.collect.dcgm.scrape``."""

from __future__ import annotations

import zlib


class Down(Exception):
    """A fetch failed for the reason given (the words stored as the target's error)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


class Inflater:
    """A gzip body inflated piece by piece, each with the room left below ``max_bytes`` as its
    limit. Concatenated members (``cat a.gz b.gz``; Go's reader takes them) follow in turn."""

    def __init__(self, max_bytes: int, status: int) -> None:
        self.max_bytes, self.status = max_bytes, status
        self.out = bytearray()
        self._d = zlib.decompressobj(wbits=31)  # gzip framing only

    def feed(self, data: bytes) -> None:
        while data:
            room = self.max_bytes + 1 - len(self.out)
            try:
                self.out += self._d.decompress(data, room)
            except zlib.error as exc:
                why = f"not gzip data although its Content-Encoding says gzip ({exc})"
                raise Down(why, self.status) from None
            if len(self.out) > self.max_bytes or self._d.unconsumed_tail:
                raise Down(
                    f"gzip body larger than {self.max_bytes:,} bytes once decompressed",
                    self.status,
                )
            data = self._d.unused_data if self._d.eof else b""
            if data:
                self._d = zlib.decompressobj(wbits=31)

    def finish(self) -> bytes:
        if not self._d.eof:
            raise Down(
                f"truncated gzip body (ends after {len(self.out):,} decompressed bytes)",
                self.status,
            )
        return bytes(self.out)
