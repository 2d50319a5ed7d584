"""Running Slurm's own client commands, the way an SRE would, and saying in one line why not.

Factory Floor asks the cluster the client's own configuration names (``SLURM_CONF``, else
``/etc/slurm/slurm.conf``): no REST daemon, no database credentials, only ``sacct`` (job
history, needs slurmdbd), ``squeue`` (jobs now), ``sinfo --json`` or ``scontrol show node -o``
(node states and drain/down reasons with who set them and when), ``scontrol show reservation
-o`` (reservations: a maintenance one is planned down time). Each command is asked for
``--json`` where the installed Slurm has it (21.08+), else for its parsable text form; which
one worked is remembered per command (``mode``), so an old Slurm costs one failed try.

Every command runs with ``TZ=UTC`` and ``LC_ALL=C``: Slurm prints text times in the client's
zone, so a cluster whose clock is in another zone still gives UTC here (``--json`` gives unix
seconds anyway). What goes wrong is a ``SlurmError`` with one line: the command is not on PATH,
slurmctld does not answer, accounting is not configured (no slurmdbd: ``sacct`` has no
history, ``squeue`` still works), a timeout, output that is neither JSON nor the text asked for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from telemetry.errors import FactoryFloorError

TIMEOUT_S = 60.0
MODES = ("auto", "json", "text")
# The parsable text forms: free text (a job name) last, so a "|" in it cannot shift fields.
SACCT_FIELDS = (
    "JobIDRaw,JobID,Cluster,User,Partition,NodeList,State,Reason,ExitCode,Submit,Start,End,"
    "Account,AllocTRES,JobName"
)
SQUEUE_FORMAT = "%A|%i|%F|%K|%u|%P|%N|%T|%r|%V|%S|%e|%a|%b|%j"
TEXT_ONLY = frozenset({"reservations"})  # no --json form in 22.05: text whatever the mode


class SlurmError(FactoryFloorError):
    """A Slurm command that did not give an answer, in one line (``str(exc)``)."""


@dataclass(frozen=True)
class Output:
    command: str  # "sacct", "squeue", "nodes"
    form: str  # "json" or "text"
    data: bytes
    seconds: float


def commands(since: str, form: str) -> dict[str, list[str]]:
    """The argv of each command in ``form`` ("json" or "text"); ``since`` is an ISO time."""
    if form == "json":
        return {
            "sacct": ["sacct", "--json", "-a", "-D", "-S", since, "-E", "now"],
            "squeue": ["squeue", "--json"],
            "nodes": ["sinfo", "--json"],
            "reservations": RESERVATIONS,
        }
    return {
        # Not -X: it can drop a requeued record that never got an allocation, which the
        # JSON keeps; step lines (JobIDRaw N.batch, N.0) are skipped by the parser instead.
        "sacct": ["sacct", "-P", "-n", "-a", "-D", "-S", since, "-E", "now",
                  "-o", SACCT_FIELDS],
        "squeue": ["squeue", "-h", "-a", "-o", SQUEUE_FORMAT],
        "nodes": ["scontrol", "show", "node", "-o"],
        "reservations": RESERVATIONS,
    }  # fmt: skip


RESERVATIONS = ["scontrol", "show", "reservation", "-o"]


def recorded_commands(since: str) -> dict[str, list[str]]:
    """File name -> argv of every command in both forms (what the tests' recordings hold)."""
    out = {}
    for form, ext in (("json", "json"), ("text", "txt")):
        for name, argv in commands(since, form).items():
            if name not in TEXT_ONLY or form == "text":
                out[f"{name}.{ext}"] = argv
    out["sinfo-R.txt"] = ["sinfo", "-R", "-h", "-o", "%u|%H|%N|%E"]
    return out


# What Slurm's stderr says, and what it means for the person running Factory Floor.
_DIAGNOSES = (
    (re.compile(r"accounting storage is disabled|AccountingStorageType.*none", re.I),
     "accounting storage is disabled (no slurmdbd configured): sacct has no job history; "
     "running jobs still come from squeue"),
    (re.compile(r"Unable to contact slurm controller|slurm_load_\w+ error: .*connect", re.I),
     "slurmctld is not answering ({first})"),
    (re.compile(r"slurmdbd|Connection refused.*6819|Problem talking to the database", re.I),
     "slurmdbd is not answering ({first})"),
    (re.compile(r"authentication error|Munge|munge", re.I),
     "authentication failed: is munged running with the cluster's key? ({first})"),
    (re.compile(r"Could not establish a configuration source|Unable to process configuration "
                r"file|No such file.*slurm\.conf|config(uration)? file", re.I),
     "no Slurm configuration: set SLURM_CONF or install /etc/slurm/slurm.conf ({first})"),
)  # fmt: skip
_NO_JSON = re.compile(r"unrecognized option|invalid option|--json|openapi|data_parser", re.I)


def diagnose(command: str, stderr: str, code: int) -> str:
    """One line for a failed command from what it printed."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    first = lines[0] if lines else f"exit status {code}"
    for pattern, words in _DIAGNOSES:
        if pattern.search(stderr):
            return f"{command}: {words.format(first=first)}"
    return f"{command}: {first}" if code == 0 else f"{command}: exit status {code}: {first}"


Runner = Callable[[Sequence[str], Mapping[str, str], float], "subprocess.CompletedProcess[bytes]"]


def _run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Any:
    return subprocess.run(
        list(argv), env=dict(env), capture_output=True, timeout=timeout,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


@dataclass
class SlurmClient:
    """The Slurm commands of the cluster ``SLURM_CONF`` names (``env`` adds to os.environ)."""

    mode: str = "auto"  # "json", "text", or "auto": JSON where it works, else text
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = TIMEOUT_S
    runner: Runner = _run
    forms: dict[str, str] = field(default_factory=dict)  # per command: text for good (no --json)
    last_form: dict[str, str] = field(default_factory=dict)  # per command: the last answer's

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise FactoryFloorError(f"--slurm-format must be one of {', '.join(MODES)}")

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.env, "TZ": "UTC", "LC_ALL": "C"}

    def fetch(self, command: str, since: str) -> Output:
        """Run ``command`` ("sacct", "squeue", "nodes") in the form that works here."""
        form = self.forms.get(command) or ("text" if self.mode == "text" else "json")
        if command in TEXT_ONLY:
            form = "text"
        try:
            out = self._once(command, since, form)
        except SlurmError as exc:
            if self.mode != "auto" or form != "json" or getattr(exc, "final", False):
                raise
            if getattr(exc, "no_json", False):  # an older Slurm: text from now on
                self.forms[command] = "text"
            # A failing --json says little ("Failed while looking for jobs", nothing on
            # stderr); the text form's error names the cause (the controller is down).
            out = self._once(command, since, "text")
        self.last_form[command] = out.form
        return out

    def _once(self, command: str, since: str, form: str) -> Output:
        env = self.environment()
        argv = commands(since, form)[command]
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise _final(
                f"{argv[0]}: not found on PATH: install the Slurm client commands "
                "(Debian: slurm-client) or add their directory to PATH"
            )
        t0 = time.perf_counter()
        try:
            p = self.runner(argv, env, self.timeout_s)
        except subprocess.TimeoutExpired:
            raise _final(
                f"{argv[0]}: no answer within {self.timeout_s:g} s (is slurmctld/slurmdbd busy "
                "or down?)"
            ) from None
        except OSError as exc:
            raise SlurmError(f"{argv[0]}: cannot run: {exc.strerror or exc}") from None
        seconds = time.perf_counter() - t0
        stderr = p.stderr.decode("utf-8", "replace")
        if form == "json":
            body = p.stdout.lstrip()
            if p.returncode != 0 or not body.startswith(b"{"):
                if _NO_JSON.search(stderr) or (p.returncode == 0 and body):
                    exc = SlurmError(f"{argv[0]}: --json not supported here")
                    exc.no_json = True  # type: ignore[attr-defined]
                    raise exc
                raise SlurmError(diagnose(argv[0], stderr, p.returncode))
            errors = _json_errors(p.stdout)
            if errors:
                raise SlurmError(diagnose(argv[0], stderr + "\n".join(errors), p.returncode))
        elif p.returncode != 0:
            raise SlurmError(diagnose(argv[0], stderr, p.returncode))
        elif command == "sacct" and re.search(r"accounting storage is disabled", stderr, re.I):
            raise SlurmError(diagnose(argv[0], stderr, 1))
        return Output(command, form, p.stdout, seconds)


_NO_ERRORS = re.compile(rb'"errors"\s*:\s*\[\s*\]')


def _final(line: str) -> SlurmError:
    """An error the other form would only repeat (slower): not asked again in text."""
    exc = SlurmError(line)
    exc.final = True  # type: ignore[attr-defined]
    return exc


def _json_errors(data: bytes) -> list[str]:
    """The ``errors`` a Slurm JSON reply carries (22.05 exits 0 with them). An empty list
    near the top (where Slurm prints it) is found without decoding a 30 MB reply twice."""
    if _NO_ERRORS.search(data, 0, 1 << 16):
        return []
    try:
        doc = json.loads(data)
    except ValueError:
        return ["output is not JSON"]
    out = []
    for e in doc.get("errors") or []:
        if isinstance(e, Mapping):
            out.append(str(e.get("description") or e.get("error") or e))
        else:
            out.append(str(e))
    return out


def recorded_runner(directory: str) -> Runner:
    """A runner that answers each command with what the real one printed once, recorded in
    ``directory`` under the names of ``recorded_commands`` (the tests' recordings of a real
    cluster; the benchmark's 10,000-job outputs): parsing and storing without a cluster."""
    names = {tuple(argv[:3]): name for name, argv in recorded_commands("-").items()}

    def run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Any:
        name = names.get(tuple(argv[:3]))
        path = os.path.join(directory, name) if name else ""
        if not name or not os.path.exists(path):
            return subprocess.CompletedProcess(list(argv), 1, b"", b"no recording")
        with open(path, "rb") as fh:
            return subprocess.CompletedProcess(list(argv), 0, fh.read(), b"")

    return run
