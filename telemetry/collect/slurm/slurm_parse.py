"""What Slurm's commands print, as rows: jobs (``sacct``, ``squeue``) and nodes (``sinfo --json``,
``scontrol show node -o``), each from ``--json`` (OpenAPI v0.0.38 / dbv0.0.38, Slurm 22.05) or
from the parsable text form (``slurm_client.SACCT_FIELDS``, ``SQUEUE_FORMAT``), and
reservations (``scontrol show reservation -o``, text only in 22.05). A job's ``account`` and
its allocated GPUs (``gpus``: sacct's AllocTRES ``gres/gpu=N``, squeue's TRES) are None when
Slurm did not say (a job without GPUs, a pending one, a cluster without ``gres/gpu`` in
``AccountingStorageTRES``).

Both forms give the same rows (the tests hold them to it on recordings of a real cluster), so
the rest of Factory Floor never knows which one a cluster spoke. Times are naive UTC (the
client runs the commands with ``TZ=UTC``; JSON carries unix seconds). A requeued job is several
``sacct -D`` records with one job id: ``requeue`` numbers them in time order (0 the first run),
which is also ``squeue``'s restart count. A state outside ``JOB_STATES``/``NODE_STATES`` is kept
as Slurm said it and counted (``unknown``), never an error; a line that is not the form asked
for is counted as unreadable and skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from telemetry.hostlist import expand_hostlist

JOB_COLUMNS = (
    "cluster", "job_id", "job_id_raw", "array_job_id", "array_task_id", "requeue", "name",
    "user_name", "partition", "nodelist", "hosts", "state", "reason", "exit_code",
    "exit_signal", "submit_ts", "start_ts", "end_ts", "account", "gpus",
)  # fmt: skip
NODE_COLUMNS = ("host", "state", "reason", "reason_user", "reason_ts", "gpus")
JOB_STATES = frozenset(
    "BOOT_FAIL CANCELLED COMPLETED COMPLETING CONFIGURING DEADLINE FAILED NODE_FAIL "
    "OUT_OF_MEMORY PENDING PREEMPTED RUNNING REQUEUED REQUEUE_FED REQUEUE_HOLD RESIZING "
    "REVOKED SIGNALING SPECIAL_EXIT STAGE_OUT STOPPED SUSPENDED TIMEOUT".split()
)
NODE_STATES = frozenset(
    "ALLOCATED ALLOC COMPLETING DOWN DRAIN DRAINED DRAINING FAIL FAILING FUTURE IDLE MAINT "
    "MIXED MIX NOT_RESPONDING PLANNED POWER_DOWN POWERED_DOWN POWERING_DOWN POWERING_UP "
    "POWER_UP REBOOT_REQUESTED REBOOT_ISSUED RESERVED RESV UNKNOWN CLOUD COMPLETING "
    "INVALID_REG INVALID DYNAMIC_FUTURE DYNAMIC_NORM BLOCKED PERFCTRS MAINTENANCE POWER_DRAIN "
    "REBOOT_CANCELED".split()
)
_NULL_TEXT = frozenset({"", "None", "Unknown", "N/A", "None assigned", "(null)", "n/a"})
TEXT_FIELDS = 15  # SACCT_FIELDS / SQUEUE_FORMAT: the job name, which may hold "|", last
MAX_GPUS = 2**31 - 1  # a count the store's INTEGER holds; more is not a count Slurm made
# a TRES list's GPUs: "gres/gpu=4" (sacct AllocTRES, squeue --json tres_alloc_str) or a typed
# "gres/gpu:h100=4"; squeue's per-node "gres:gpu:4" / "gres/gpu:h100:4" / "gpu:4"
_TRES_GPU = re.compile(r"(?:^|,)\s*gres/gpu(?::[^=,]*)?=([^,]*)")
_TRES_GPU_UNTYPED = re.compile(r"(?:^|,)\s*gres/gpu=([^,]*)")
_PER_NODE_GPU = re.compile(r"(?:^|,)\s*(?:gres[:/])?gpu(?::[^:,()]+)?:(\d+)")


@dataclass
class Parsed:
    """Rows of one command's output, what was not understood, and which states were new."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0
    unknown_states: dict[str, int] = field(default_factory=dict)

    def note_state(self, state: str | None, known: frozenset[str]) -> None:
        for part in (state or "").split("+"):
            if part and part not in known:
                self.unknown_states[part] = self.unknown_states.get(part, 0) + 1


# -- values ----------------------------------------------------------------------------------
def _epoch(v: Any) -> datetime | None:
    """Unix seconds -> naive UTC; 0, None and Slurm's "infinite"/"not set" -> None."""
    if isinstance(v, dict):  # 0.0.39+: {"set": true, "infinite": false, "number": N}
        v = v.get("number") if v.get("set", True) and not v.get("infinite") else None
    if not isinstance(v, (int, float)) or v <= 0 or v >= 2**32 - 2:
        return None
    return datetime.fromtimestamp(v, UTC).replace(tzinfo=None)


def _iso(v: str) -> datetime | None:
    v = v.strip()
    if v in _NULL_TEXT:
        return None
    try:
        return datetime.fromisoformat(v)
    except ValueError:
        return None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return None if s in _NULL_TEXT else s


def _int(v: Any) -> int | None:
    if isinstance(v, dict):
        v = v.get("number") if v.get("set", True) and not v.get("infinite") else None
    try:
        return None if v is None or v == "" else int(v)
    except (TypeError, ValueError):
        return None


def _job(**kw: Any) -> dict[str, Any]:
    row = dict.fromkeys(JOB_COLUMNS)
    row.update(kw)
    row["hosts"] = list(expand_hostlist(row["nodelist"]))
    aj, at = row["array_job_id"], row["array_task_id"]
    raw = row["job_id_raw"]
    row["job_id"] = f"{aj}_{at}" if aj and at is not None else str(raw)
    row["account"] = _text(row["account"]) if isinstance(row["account"], str) else None
    return row


def _count(v: Any) -> int | None:
    """A GPU count as Slurm printed it; anything else (negative, huge, not a number) None."""
    try:
        n = int(str(v).strip())
    except (TypeError, ValueError):
        return None
    return n if 0 <= n <= MAX_GPUS else None


def tres_gpus(tres: Any) -> int | None:
    """Allocated GPUs of a TRES list (``billing=8,cpu=8,gres/gpu=4,mem=1G,node=1``): the
    untyped ``gres/gpu`` count, else the sum of the typed ones; None when it names no GPU
    (a job without GPUs, or one not allocated yet) or the count is not a count."""
    text = _text(tres)
    if not text:
        return None
    untyped = _TRES_GPU_UNTYPED.search(text)
    if untyped:
        return _count(untyped.group(1))
    typed = [_count(m) for m in _TRES_GPU.findall(text)]
    if not typed or None in typed:
        return None
    return _count(sum(typed))  # type: ignore[arg-type]


def per_node_gpus(gres: Any, nodes: int) -> int | None:
    """squeue's per-node request (``gres:gpu:4``, ``gres/gpu:h100:4``) times the job's nodes."""
    text = _text(gres)
    found = _PER_NODE_GPU.findall(text or "")
    if not found:
        return None
    return _count(sum(int(n) for n in found) * max(nodes, 1))


def _json_gpus(items: Any) -> int | None:
    """sacct --json's ``tres.allocated``: [{type: gres, name: gpu[:type], count: N}, ...]."""
    if not isinstance(items, list):
        return None
    parts = [
        f"gres/{t.get('name')}={t.get('count')}" for t in items
        if isinstance(t, dict) and t.get("type") == "gres"
        and str(t.get("name") or "").split(":")[0] == "gpu"
    ]  # fmt: skip
    return tres_gpus(",".join(parts)) if parts else None


def _each(items: Any, make: Callable[[Any], dict[str, Any]], known: frozenset[str]) -> Parsed:
    """Rows ``make`` gives for each item of a JSON list; an item it cannot read is counted."""
    out = Parsed()
    for item in items or []:
        try:
            row = make(item)
        except (KeyError, TypeError, ValueError, AttributeError):
            out.unreadable += 1
            continue
        out.note_state(row["state"], known)
        out.rows.append(row)
    return out


# -- jobs ------------------------------------------------------------------------------------
def sacct_json(data: bytes) -> Parsed:
    out = _each(json.loads(data).get("jobs"), _sacct_job, JOB_STATES)
    _number_requeues(out.rows)
    return out


def _sacct_job(j: dict[str, Any]) -> dict[str, Any]:
    state = j.get("state") or {}
    current = state.get("current") if isinstance(state, dict) else state
    if isinstance(current, list):  # 0.0.39+: a list of flags
        current = "+".join(current)
    ec = j.get("exit_code") or {}
    sig = ec.get("signal") or {}
    times = j.get("time") or {}
    arr = j.get("array") or {}
    return _job(
        cluster=j.get("cluster"), job_id_raw=int(j["job_id"]),
        array_job_id=_int(arr.get("job_id")) or None,
        array_task_id=_int(arr.get("task_id")), name=j.get("name"),
        user_name=j.get("user"), partition=_text(j.get("partition")),
        nodelist=_text(j.get("nodes")), state=str(current or "").upper(),
        reason=_text(state.get("reason") if isinstance(state, dict) else None),
        exit_code=_exit_code(ec, current),
        exit_signal=_int(sig.get("signal_id")) if isinstance(sig, dict) else None,
        submit_ts=_epoch(times.get("submission")), start_ts=_epoch(times.get("start")),
        end_ts=_epoch(times.get("end")), account=j.get("account"),
        gpus=_json_gpus((j.get("tres") or {}).get("allocated")),
    )  # fmt: skip


def _exit_code(ec: dict[str, Any], state: Any) -> int | None:
    """The JSON form's exit code, or None where it cannot be true: Slurm 22.05's sacct --json
    reports 0 for every job, but a FAILED job is one that exited non-zero (the text form,
    the default, has the real code)."""
    code = _int(ec.get("return_code"))
    return None if code == 0 and str(state or "").upper() == "FAILED" else code


def _fields(data: bytes, out: Parsed, steps: bool = False) -> Iterator[list[str]]:
    """The ``TEXT_FIELDS`` ``|``-separated fields of each job line (the last one, a job name,
    may hold ``|``); other lines are counted unreadable, and with ``steps`` a step line
    (``N.batch``, ``N.0``) is skipped: the job's own line says how it ended."""
    n = TEXT_FIELDS
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        f = line.split("|", n - 1)
        if steps and len(f) == n and "." in f[0] and f[0].split(".")[0].isdigit():
            continue
        if len(f) != n or not f[0].strip().isdigit():
            out.unreadable += 1
            continue
        yield f


def sacct_text(data: bytes) -> Parsed:
    """``sacct -P -n -o SACCT_FIELDS`` lines (step lines skipped)."""
    out = Parsed()
    for f in _fields(data, out, steps=True):
        raw, jid, cluster, user, part, nodes, state, reason, ec, sub, start, end, acct, tres, \
            name = f
        aj, _, at = jid.partition("_")
        code, _, sig = ec.partition(":")
        row = _job(
            cluster=_text(cluster), job_id_raw=int(raw),
            array_job_id=int(aj) if at.isdigit() else None,
            array_task_id=int(at) if at.isdigit() else None, name=name, user_name=_text(user),
            partition=_text(part), nodelist=_text(nodes),
            state=state.split(" ")[0].upper(), reason=_text(reason),
            exit_code=_int(code), exit_signal=_int(sig) or None,
            submit_ts=_iso(sub), start_ts=_iso(start), end_ts=_iso(end), account=acct,
            gpus=tres_gpus(tres),
        )  # fmt: skip
        out.note_state(row["state"], JOB_STATES)
        out.rows.append(row)
    _number_requeues(out.rows)
    return out


def _number_requeues(rows: list[dict[str, Any]]) -> None:
    """``requeue`` = the record's place among the records of its job id, oldest first."""
    order = sorted(
        range(len(rows)),
        key=lambda i: (
            rows[i]["cluster"] or "", rows[i]["job_id_raw"],
            rows[i]["submit_ts"] or datetime.min, rows[i]["start_ts"] or datetime.max,
        ),
    )  # fmt: skip
    last, n = None, 0
    for i in order:
        key = (rows[i]["cluster"] or "", rows[i]["job_id_raw"])
        n = n + 1 if key == last else 0
        rows[i]["requeue"], last = n, key


def squeue_json(data: bytes) -> Parsed:
    return _each(json.loads(data).get("jobs"), _squeue_job, JOB_STATES)


def _squeue_job(j: dict[str, Any]) -> dict[str, Any]:
    state = j.get("job_state")
    state = "+".join(state) if isinstance(state, list) else str(state or "")
    live = state in ("RUNNING", "PENDING", "SUSPENDED", "CONFIGURING", "COMPLETING")
    return _job(
        cluster=j.get("cluster"), job_id_raw=int(_int(j["job_id"])),  # type: ignore[arg-type]
        array_job_id=_int(j.get("array_job_id")) or None,
        array_task_id=_int(j.get("array_task_id")), name=j.get("name"),
        user_name=j.get("user_name"), partition=_text(j.get("partition")),
        nodelist=_text(j.get("nodes")), state=state.upper(),
        reason=_text(j.get("state_reason")), exit_code=None, exit_signal=None,
        submit_ts=_epoch(j.get("submit_time")), start_ts=_epoch(j.get("start_time")),
        end_ts=None if live else _epoch(j.get("end_time")),
        requeue=_int(j.get("restart_cnt")), account=j.get("account"),
        gpus=tres_gpus(j.get("tres_alloc_str"))
        or per_node_gpus(j.get("tres_per_node"), _int(j.get("node_count")) or 1),
    )  # fmt: skip


def squeue_text(data: bytes) -> Parsed:
    """``squeue -h -o SQUEUE_FORMAT`` lines (no restart count in this form: ``requeue`` None)."""
    out = Parsed()
    for f in _fields(data, out):
        raw, _jid, aj, at, user, part, nodes, state, reason, sub, start, end, acct, gres, \
            name = f
        state = state.strip().upper()
        live = state in ("RUNNING", "PENDING", "SUSPENDED", "CONFIGURING", "COMPLETING")
        row = _job(
            cluster=None, job_id_raw=int(raw),
            array_job_id=int(aj) if at.strip().isdigit() else None,
            array_task_id=int(at) if at.strip().isdigit() else None, name=name,
            user_name=_text(user), partition=_text(part), nodelist=_text(nodes), state=state,
            reason=_text(reason), submit_ts=_iso(sub), start_ts=_iso(start),
            end_ts=None if live else _iso(end), account=acct,
        )  # fmt: skip
        row["gpus"] = per_node_gpus(gres, len(row["hosts"]))
        out.note_state(state, JOB_STATES)
        out.rows.append(row)
    return out


# -- nodes -----------------------------------------------------------------------------------
def sinfo_json(data: bytes) -> Parsed:
    return _each(json.loads(data).get("nodes"), _sinfo_node, NODE_STATES)


def _sinfo_node(n: dict[str, Any]) -> dict[str, Any]:
    base = n.get("state")
    base = "+".join(base) if isinstance(base, list) else str(base or "")
    flags = [str(f) for f in n.get("state_flags") or []]
    state = "+".join([base.upper(), *flags]).strip("+")
    return {
        "host": str(n["name"]),
        "state": state,
        "reason": _text(n.get("reason")),
        "reason_user": _text(n.get("reason_set_by_user")),
        "reason_ts": _epoch(n.get("reason_changed_at")),
        "gpus": per_node_gpus(n.get("gres"), 1),
    }


_NODE = re.compile(r"(?:^|\s)NodeName=(\S+)")
_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_GRES = re.compile(r"(?:^|\s)Gres=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[([^@\]]*)@([^\]]+)\])?\s*$")


def scontrol_nodes(data: bytes) -> Parsed:
    """``scontrol show node -o``: one line per node, ``Key=Value`` pairs, ``Reason=`` last
    with ``[user@time]`` after it."""
    out = Parsed()
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        node, state = _NODE.search(line), _STATE.search(line)
        if not node or not state:
            out.unreadable += 1
            continue
        st = state.group(1).upper()
        if st.endswith("*"):  # the controller cannot reach it
            st = st.rstrip("*") + "+NOT_RESPONDING"
        reason = _REASON.search(line)
        row = {
            "host": node.group(1),
            "state": st,
            "reason": _text(reason.group(1)) if reason else None,
            "reason_user": _text(reason.group(2)) if reason else None,
            "reason_ts": _iso(reason.group(3)) if reason and reason.group(3) else None,
            "gpus": per_node_gpus(g.group(1), 1) if (g := _GRES.search(line)) else None,
        }
        out.note_state(st, NODE_STATES)
        out.rows.append(row)
    return out


# -- reservations ------------------------------------------------------------------------------
RESERVATION_COLUMNS = ("name", "nodes", "start_ts", "end_ts", "flags", "users", "accounts")
_RESV_KEYS = ("ReservationName", "StartTime", "EndTime", "Nodes", "Flags", "Users", "Accounts")
_RESV = {k: re.compile(rf"(?:^|\s){k}=(\S*)") for k in _RESV_KEYS}
NO_RESERVATIONS = "No reservations in the system"


def scontrol_reservations(data: bytes) -> Parsed:
    """``scontrol show reservation -o`` (Slurm 22.05 has no JSON form of it): one line per
    reservation, ``Key=Value`` pairs. A line without a name, a start or an end before its
    start, or whose host list cannot be read, is counted unreadable; ``flags`` is Slurm's
    comma list (``MAINT,IGNORE_JOBS,SPEC_NODES``: a MAINT one is planned down time)."""
    out = Parsed()
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip() or line.strip() == NO_RESERVATIONS:
            continue
        got = {k: (m.group(1) if (m := rx.search(line)) else None) for k, rx in _RESV.items()}
        start, end = _iso(got["StartTime"] or ""), _iso(got["EndTime"] or "")
        try:
            nodes = list(expand_hostlist(_text(got["Nodes"])))
        except ValueError:
            nodes = None
        if not _text(got["ReservationName"]) or not start or not end or end < start or (
            nodes is None
        ):
            out.unreadable += 1
            continue
        out.rows.append({
            "name": got["ReservationName"], "nodes": nodes, "start_ts": start, "end_ts": end,
            "flags": (_text(got["Flags"]) or "").upper() or None,
            "users": _text(got["Users"]), "accounts": _text(got["Accounts"]),
        })  # fmt: skip
    return out


PARSERS = {
    ("sacct", "json"): sacct_json,
    ("sacct", "text"): sacct_text,
    ("squeue", "json"): squeue_json,
    ("squeue", "text"): squeue_text,
    ("nodes", "json"): sinfo_json,
    ("nodes", "text"): scontrol_nodes,
    ("reservations", "text"): scontrol_reservations,
}


def parse(command: str, form: str, data: bytes) -> Parsed:
    """Rows of ``command``'s output in ``form``; output that is not that form is one
    ``ValueError`` naming the command."""
    try:
        return PARSERS[(command, form)](data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{command} --json: output is not JSON ({exc.msg})") from None


def reservations_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESERVATION_COLUMNS))
    for c in ("start_ts", "end_ts"):
        df[c] = pd.to_datetime(df[c])
    return df


def jobs_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(JOB_COLUMNS))
    for c in ("submit_ts", "start_ts", "end_ts"):
        df[c] = pd.to_datetime(df[c])
    for c in ("job_id_raw", "array_job_id", "array_task_id", "requeue", "exit_code",
              "exit_signal", "gpus"):  # fmt: skip
        df[c] = pd.array(df[c], dtype="Int64")
    return df
