"""Opening a store's DuckDB file: one clear error for a missing directory, a missing file or
a file another process holds, and the opt-in SQL audit of every statement run on it.

DuckDB's own errors are long and name no remedy; the owning process and its readers all come
through ``open_connection``, so the lock message (``StoreLockedError`` naming the holder) and
the write-failure wording (``io_reason``) are decided here once.
"""

from __future__ import annotations

import os
import re
from typing import Any

import duckdb

from telemetry.errors import StoreError, StoreLockedError

# Opt-in SQL audit for the security tests (see ``_Audited``): read once per ``Store``.
SQL_AUDIT_ENV = "FACTORYFLOOR_SQL_AUDIT"

_LOCK_RE = re.compile(r'lock on file "(?P<path>[^"]+)".*held in (?P<holder>.+?)(?:\. See|$)', re.S)


def io_reason(exc: Exception) -> str:
    """One line for a failed write or commit (a full disk, a file-size limit)."""
    text = str(exc).splitlines()[0]
    for marker in ("Could not write", "No space left", "File too large", "Read-only"):
        i = text.find(marker)
        if i >= 0:
            return f"cannot write ({text[i:]}); nothing of this batch was stored"
    return text


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back after a failure; a commit that failed has already ended the transaction."""
    try:
        con.rollback()
    except duckdb.TransactionException:
        pass


def open_connection(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to ``path``; ``StoreLockedError`` if another process holds it,
    ``StoreError`` with one line for anything else."""
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise StoreError(path, f"directory {parent} does not exist")
        if read_only and not os.path.exists(path):
            raise StoreError(path, "no such store file (run `factoryfloor replay` to create one)")
    try:
        con = duckdb.connect(path, read_only=read_only)
        # no progress bar (cursors inherit it): DuckDB draws one on stdout for a query past
        # 2 s, such as a store's upgrade, which would land inside `summary --json` or a log
        con.execute("SET enable_progress_bar = false")
        return con
    except duckdb.IOException as exc:
        m = _LOCK_RE.search(str(exc))
        if m:
            raise StoreLockedError(path, m.group("holder").strip()) from None
        raise StoreError(path, str(exc).splitlines()[0]) from None
    except duckdb.Error as exc:
        raise StoreError(path, str(exc).splitlines()[0]) from None


class _Audited:
    """A DuckDB connection (or cursor) that appends every SQL text it is given to a file, one
    ``repr`` per line, before running it. The injection tests send a marker string through
    every input and then require that no audited SQL contains it: a value pasted into SQL
    (even a harmless-looking read) shows up here, where a changed row count would not."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str) -> None:
        self._raw, self._path = con, path

    def _log(self, sql: str) -> None:
        # One O_APPEND write per statement: lines from concurrent threads do not interleave.
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (repr(sql) + "\n").encode())
        finally:
            os.close(fd)

    def execute(self, sql: str, *args: Any) -> Any:
        self._log(sql)
        return self._raw.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._log(sql)
        return self._raw.executemany(sql, *args)

    def cursor(self) -> Any:
        return _Audited(self._raw.cursor(), self._path)

    def __getattr__(self, name: str) -> Any:  # begin, commit, register, close, ...
        return getattr(self._raw, name)


def audited(con: duckdb.DuckDBPyConnection, path: str | None) -> duckdb.DuckDBPyConnection:
    """``con`` itself unless auditing is on: with it off the store pays nothing."""
    return con if not path else _Audited(con, path)  # type: ignore[return-value]
