"""What to do about an interruption (issue 58, item 2): drain the host, restart from the
newest good checkpoint, stop and page the owner, or investigate.

The rules are one table, ``reference/actions.toml``, each with its source; the first rule whose
conditions all hold decides. An operator's TOML file of the same shape overrides it
(``--actions FILE``, ``configure``): the process keeps one table, set at the entry point, so
every page, the summary, the alerts and the Markdown give the same action. This module is
pure: ``queries.offenders`` gathers an interruption's ``Facts`` from the store and calls
``recommend``. Bad TOML is a ``FactoryFloorError`` of one line naming the file and the fault.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telemetry.errors import FactoryFloorError

TABLE = Path(__file__).parent / "reference" / "actions.toml"
ACTIONS = {
    "drain": "drain or exclude the host",
    "restart": "restart from the newest good checkpoint",
    "page": "stop and page the owner",
    "investigate": "investigate",
}
CONDITIONS = ("nan_loss", "restart_loop", "recurred", "repeat_offender", "host_known",
              "culprit_known", "planned", "xid_action", "category")  # fmt: skip


@dataclass(frozen=True)
class Rule:
    name: str
    when: dict[str, Any]
    action: str
    reason: str
    source: str


@dataclass(frozen=True)
class Table:
    rules: tuple[Rule, ...]
    days: float = 14.0  # the node memory: culprit incidents within this many days
    min_count: int = 2  # a node named culprit this often is a repeat offender


@dataclass(frozen=True)
class Facts:
    """What the rules look at in one interruption (``CONDITIONS``) and the words they say."""

    planned: bool = False
    category: str | None = None
    component: str | None = None
    host: str | None = None
    rank: int | None = None
    xid: int | None = None
    xid_action: str | None = None
    nan_loss: bool = False
    restart_loop: bool = False
    recurred: bool = False
    count: int = 0  # times its host was the culprit in the node memory's window
    days: float = 14.0
    repeat_offender: bool = False
    candidates: tuple[str, ...] = field(default_factory=tuple)

    def value(self, name: str) -> Any:
        if name == "host_known":
            return self.host is not None
        if name == "culprit_known":
            return self.host is not None or self.rank is not None
        return getattr(self, name)


def recommend(facts: Facts, table: Table | None = None) -> tuple[str, str, str]:
    """(action, reason, rule name) of the first rule ``facts`` meet; the shipped table ends
    with a rule of no conditions, an operator's may not (then "investigate", said so)."""
    for rule in (table or current()).rules:
        if all(_holds(facts.value(k), want) for k, want in rule.when.items()):
            return rule.action, _words(rule.reason, facts), rule.name
    return "investigate", "no rule of the actions table matched", "none"


def _holds(got: Any, want: Any) -> bool:
    return got in want if isinstance(want, list) else got == want


def _words(text: str, f: Facts) -> str:
    cands = ", ".join(f.candidates) if f.candidates else "none listed"
    days = f"{f.days:g}"
    return text.format(host=f.host, rank=f.rank, xid=f.xid, xid_action=f.xid_action,
                       component=f.component, count=f.count, days=days,
                       candidates=cands)  # fmt: skip


_current: Table | None = None


def current() -> Table:
    """The table in force: the operator's (``configure``), else the shipped one."""
    global _current
    if _current is None:
        _current = load()
    return _current


def configure(path: str | None) -> Table:
    """Put the shipped table, overridden by the TOML file at ``path`` (if any), in force."""
    global _current
    _current = load(path)
    return _current


def load(path: str | None = None) -> Table:
    """The shipped table with ``path``'s overrides applied (module doc)."""
    base = _parse(_read(str(TABLE)), str(TABLE))
    if not path:
        return base
    return _merge(base, _read(path), path)


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise FactoryFloorError(f"actions file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FactoryFloorError(f"actions file {path}: not TOML: {exc}") from None


def _parse(doc: dict[str, Any], where: str) -> Table:
    rules = tuple(_rule(r, f"{where}: rule {i + 1}") for i, r in enumerate(_rules(doc, where)))
    days, least = _memory(doc, where, Table(()))
    return Table(rules, days, least)


def _rules(doc: dict[str, Any], where: str) -> list[dict[str, Any]]:
    unknown = set(doc) - {"rule", "repeat_offender"}
    if unknown:
        raise FactoryFloorError(f"actions file {where}: unknown key(s) {', '.join(sorted(unknown))}"
                                " (rule, repeat_offender)")  # fmt: skip
    rules = doc.get("rule", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise FactoryFloorError(f"actions file {where}: 'rule' must be [[rule]] tables")
    return rules


def _rule(r: dict[str, Any], where: str) -> Rule:
    name = r.get("name")
    if not isinstance(name, str) or not name:
        raise FactoryFloorError(f"actions file {where}: a rule needs a name")
    _check(r, f"{where} ({name})")
    if "action" not in r:
        raise FactoryFloorError(f"actions file {where} ({name}): a new rule needs an action")
    return Rule(name, dict(r.get("when", {})), r["action"], str(r.get("reason", "")),
                str(r.get("source", "")))  # fmt: skip


def _check(r: dict[str, Any], where: str) -> None:
    allowed = {"name", "when", "action", "reason", "source", "enabled"}
    if set(r) - allowed:
        raise FactoryFloorError(f"actions file {where}: unknown field(s) "
                                f"{', '.join(sorted(set(r) - allowed))}")  # fmt: skip
    if "action" in r and r["action"] not in ACTIONS:
        raise FactoryFloorError(f"actions file {where}: action {r['action']!r} is not one of "
                                f"{', '.join(ACTIONS)}")  # fmt: skip
    when = r.get("when", {})
    if not isinstance(when, dict) or set(when) - set(CONDITIONS):
        bad = sorted(set(when) - set(CONDITIONS)) if isinstance(when, dict) else ["not a table"]
        raise FactoryFloorError(f"actions file {where}: unknown condition(s) {', '.join(bad)} "
                                f"(known: {', '.join(CONDITIONS)})")  # fmt: skip
    if "reason" in r:
        try:
            _words(str(r["reason"]), Facts())
        except (KeyError, IndexError, ValueError) as exc:
            raise FactoryFloorError(f"actions file {where}: reason names {exc}, which "
                                    "is no fact") from None  # fmt: skip


def _memory(doc: dict[str, Any], where: str, base: Table) -> tuple[float, int]:
    mem = doc.get("repeat_offender", {})
    days, least = mem.get("days", base.days), mem.get("min", base.min_count)
    ok_days = isinstance(days, int | float) and not isinstance(days, bool) and days > 0
    if not ok_days or not isinstance(least, int) or isinstance(least, bool) or least < 1:
        raise FactoryFloorError(f"actions file {where}: [repeat_offender] needs days > 0 and "
                                "a whole min >= 1")  # fmt: skip
    return float(days), least


def _merge(base: Table, doc: dict[str, Any], where: str) -> Table:
    """``base`` with ``doc``'s rules: a known name's fields replaced in place (``enabled =
    false`` drops it), a new name first."""
    rules = {r.name: r for r in base.rules}
    new: list[Rule] = []
    for i, r in enumerate(_rules(doc, where)):
        at = f"{where}: rule {i + 1}"
        name = r.get("name")
        if name in rules:
            _check(r, f"{at} ({name})")
            old = rules[name]
            rules[name] = Rule(name, dict(r.get("when", old.when)),
                               r.get("action", old.action), str(r.get("reason", old.reason)),
                               str(r.get("source", old.source)))  # fmt: skip
        else:
            new.append(_rule(r, at))
        if r.get("enabled", True) is False:
            rules.pop(name, None)
            new = [x for x in new if x.name != name]
    days, least = _memory(doc, where, base)
    return Table((*new, *rules.values()), days, least)
