"""Where a stored log line's file is: the path the import or the follower resolved when it
read the file (``log_files``), by the label its ``file:line`` origins carry. The only way the
dashboard learns a path to read (``telemetry.logview``): never from a request."""

from __future__ import annotations

from telemetry.store import Store


def path_of(store: Store, run_id: str | None, label: str) -> str | None:
    """The resolved path of the log whose origins read ``label``, the run's own first and then
    the newest; None when no log of that label was read from a file (a posted or simulated
    line, or a store written before paths were kept)."""
    if not store.has_table("log_files"):
        return None
    got = store.scalar(
        """SELECT path FROM log_files WHERE label = ?
           ORDER BY (run_id IS NOT DISTINCT FROM ?) DESC, seen_ts DESC LIMIT 1""",
        [label, run_id],
    )
    return str(got) if got else None
