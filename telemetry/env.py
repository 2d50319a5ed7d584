"""The process environment, read here and nowhere else.

Every variable Factory Floor looks at is in ``VARIABLES`` with what it does; each accessor reads
it when called (not at import), so a test that sets a variable sees it take effect. Settings a
user gives on the command line live in ``app.settings``; these are the few that must also reach
processes and code paths that no command line reaches (a token a script should not put in
``ps``, a benchmark switch, an audit log for the security tests).
"""

from __future__ import annotations

import os

STATE_HOME = "XDG_STATE_HOME"
TOKEN = "FACTORYFLOOR_TOKEN"
OPERATOR_TOKEN = "FACTORYFLOOR_OPERATOR_TOKEN"
MALLOC_TRIM = "FACTORYFLOOR_MALLOC_TRIM"
REPLY_CACHE = "FACTORYFLOOR_REPLY_CACHE"
RESULT_CACHE = "FACTORYFLOOR_RESULT_CACHE"
SQL_AUDIT = "FACTORYFLOOR_SQL_AUDIT"
CHECK_FIGURES = "FACTORYFLOOR_CHECK_FIGURES"
REQUEST_READ_S = "FACTORYFLOOR_REQUEST_READ_S"

VARIABLES = {
    STATE_HOME: "base of the daemon's state (the spool is $XDG_STATE_HOME/factoryfloor/spool; "
    "default ~/.local/state)",
    TOKEN: "access token when no --token-file is given (serve requires it, ingest sends it)",
    OPERATOR_TOKEN: "operator token when no --operator-token-file is given (corrections)",
    MALLOC_TRIM: "0: the server does not cap malloc arenas or trim free pages",
    REPLY_CACHE: "0: the server builds every callback reply (benchmarks measure the build)",
    RESULT_CACHE: "0: stores keep no query result, every query runs; request: every callback "
    "request starts with none, as the first after a write (cold benchmarks)",
    SQL_AUDIT: "a file every SQL statement of every store is appended to (security tests)",
    CHECK_FIGURES: "1: every figure sent is checked by plotly.py's validators first (tests)",
    REQUEST_READ_S: "seconds a request may take to arrive whole before the server cuts it off "
    "(default 60; tests shorten it)",
}


def _get(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def state_dir() -> str:
    """Where Factory Floor keeps state between runs: ``$XDG_STATE_HOME/factoryfloor``."""
    return os.path.join(_get(STATE_HOME) or os.path.expanduser("~/.local/state"), "factoryfloor")


def default_spool() -> str:
    return os.path.join(state_dir(), "spool")


def token() -> str:
    """The token from the environment, stripped ('' when unset)."""
    return os.environ.get(TOKEN, "").strip()


def operator_token() -> str:
    return os.environ.get(OPERATOR_TOKEN, "").strip()


def malloc_trim() -> bool:
    return os.environ.get(MALLOC_TRIM, "1") != "0"


def reply_cache() -> bool:
    return os.environ.get(REPLY_CACHE, "1") != "0"


def result_cache() -> bool:
    return os.environ.get(RESULT_CACHE, "1") != "0"


def result_cache_per_request() -> bool:
    """Each callback request starts with no query result kept (``RESULT_CACHE=request``)."""
    return os.environ.get(RESULT_CACHE, "1") == "request"


def check_figures() -> bool:
    return os.environ.get(CHECK_FIGURES, "0") == "1"


def sql_audit_path() -> str | None:
    return os.environ.get(SQL_AUDIT)


def request_read_s(default: float) -> float:
    """Seconds a request may take to arrive whole (``REQUEST_READ_S``), or ``default``."""
    try:
        value = float(_get(REQUEST_READ_S) or default)
    except ValueError:
        return default
    return value if value > 0 else default
