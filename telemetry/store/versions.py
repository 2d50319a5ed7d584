"""Which store version a cached query result belongs to: the last write to a table it reads.

A store bumps one version on every write (``Store._version``). Keyed on that alone, a scrape
round that wrote only GPU samples and their rollups throws away every cached result, the
training curve's and the checkpoint table's too, and the next viewer of those pages pays all
of their SQL again. Here each table remembers the version of the last write that touched it,
and a query's version is the newest among the tables its SQL names: results over tables that
no write touched stay valid, and are still shared.

What is safe when unsure: a write that does not say which tables it touched counts as a write
to all of them, and a query whose SQL names no known table, or names a view (whose tables are
not spelled out here), takes the store's own version, as every query did before. The
exception is a view whose every writer reports it by name (``tracked``: the per-GPU rollup,
one table per level under the view ``gpu_rollup``, see ``telemetry.store.rollups``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from functools import lru_cache

import duckdb


class TableVersions:
    """The version of the last write per table, and a query's version from them."""

    def __init__(self, con: duckdb.DuckDBPyConnection, tracked: Iterable[str] = ()) -> None:
        self._tracked = frozenset(name.lower() for name in tracked)
        self._written: dict[str, int] = {}
        self._everything = 0  # the last write that did not say which tables it touched
        self._lock = threading.Lock()
        self.reload(con)

    def reload(self, con: duckdb.DuckDBPyConnection) -> None:
        """Read the store's table and view names again (after a write that may create one)."""
        rows = con.execute(
            "SELECT table_name, false FROM duckdb_tables() "
            "UNION ALL SELECT view_name, true FROM duckdb_views() WHERE NOT internal"
        ).fetchall()
        self._views = frozenset(name.lower() for name, view in rows if view) - self._tracked
        names = sorted({name.lower() for name, _ in rows}, key=len, reverse=True)
        # a name as a whole word: ``runs`` in "FROM runs r", not in "reruns" or "runs_x" (a
        # column of the same name makes a query depend on that table too: safe, if wasteful)
        words = "|".join(map(re.escape, names)) or "(?!)"
        self._pattern = re.compile(rf"(?<!\w)({words})(?!\w)")
        self._tables = lru_cache(maxsize=4096)(self._find)

    def _find(self, sql: str) -> frozenset[str] | None:
        """The known tables ``sql`` names; None when it names none or names a view."""
        found = frozenset(m.lower() for m in self._pattern.findall(sql.lower()))
        return None if not found or found & self._views else found

    def wrote(self, version: int, tables: Iterable[str] | None) -> None:
        """A write committed as ``version`` touched ``tables`` (None: any table)."""
        with self._lock:
            if tables is None:
                self._everything = version
            else:
                for t in tables:
                    self._written[t.lower()] = version

    def of(self, sql: str, version: int) -> int:
        """The version of the results of ``sql`` (``version``: the store's own, the fallback)."""
        tables = self._tables(sql)
        if tables is None:
            return version
        with self._lock:
            return max([self._everything, *(self._written.get(t, 0) for t in tables)])
