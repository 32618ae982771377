"""Repair rules as data: a condition, how long it must hold, a severity and an action.

Rules come from a YAML file (``default_rules.yaml`` unless ``TRAINYARD_REPAIR_RULES``
names another); ``load_rules`` refuses a bad file with a message naming the rule and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

import yaml

DEFAULT_RULES_PATH = Path(__file__).with_name("default_rules.yaml")


class Check(StrEnum):
    PROMQL = "promql"
    GPU_COUNT = "gpu_count"
    HEARTBEAT = "heartbeat"
    BACKEND_READY = "backend_ready"


class Action(StrEnum):
    MIGRATE = "migrate"
    RESTART_JOBS = "restart_jobs"
    DRAIN = "drain"
    ALERT = "alert"

    @property
    def takes_node_out(self) -> bool:
        return self != Action.ALERT

    @property
    def urgent(self) -> bool:
        """Jobs leave the node at once instead of finishing up to the drain deadline."""
        return self in (Action.MIGRATE, Action.RESTART_JOBS)


class Severity(StrEnum):
    CRITICAL = "critical"
    MAJOR = "major"
    WARNING = "warning"

    @property
    def rank(self) -> int:
        """Lower first: the safety valve spends its budget on the worst faults first."""
        return list(Severity).index(self)


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    fault: str  # what the fault is, in words: "double-bit ECC error"
    check: Check
    severity: Severity
    action: Action
    query: str = ""
    for_seconds: float = 0.0
    threshold: float = 0.0


class RuleError(ValueError):
    """The rules file is not usable; the message names the rule and the field."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}


def parse_duration(value: object) -> float:
    """``90``, ``"90s"``, ``"2m"``, ``"1h"`` as seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(f"{value!r} is not a duration such as 30s, 2m or 1h")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


_Choice = TypeVar("_Choice", bound=StrEnum)


def _choice(kind: type[_Choice], value: object, where: str) -> _Choice:
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise RuleError(f"{where}: {value!r} is not one of {choices}") from None


def rule_from_dict(entry: object, index: int) -> Rule:
    if not isinstance(entry, dict):
        raise RuleError(f"rule {index + 1}: give each rule as a mapping")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise RuleError(f"rule {index + 1}: name is required")
    where = f"rule {name!r}"
    unknown = set(entry) - {"name", "fault", "check", "query", "for", "threshold", "severity",
                            "action"}  # fmt: skip
    if unknown:
        raise RuleError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
    check = _choice(Check, entry.get("check", "promql"), f"{where} check")
    query = str(entry.get("query") or "").strip()
    if check in (Check.PROMQL, Check.GPU_COUNT) and not query:
        raise RuleError(f"{where} query: a {check} rule needs a PromQL query")
    try:
        for_seconds = parse_duration(entry.get("for", 0))
        threshold = parse_duration(entry.get("threshold", 0))
    except ValueError as error:
        raise RuleError(f"{where} for/threshold: {error}") from None
    if check == Check.HEARTBEAT and threshold <= 0:
        raise RuleError(f"{where} threshold: a heartbeat rule needs the seconds it may miss")
    return Rule(
        name=name,
        fault=str(entry.get("fault") or name),
        check=check,
        severity=_choice(Severity, entry.get("severity", "major"), f"{where} severity"),
        action=_choice(Action, entry.get("action", "alert"), f"{where} action"),
        query=query,
        for_seconds=for_seconds,
        threshold=threshold,
    )


def parse_rules(text: str) -> tuple[Rule, ...]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RuleError(f"not YAML: {error}") from None
    entries = document.get("rules") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise RuleError("the file needs a top-level `rules:` list")
    rules = tuple(rule_from_dict(entry, index) for index, entry in enumerate(entries))
    names = [rule.name for rule in rules]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise RuleError(f"rule names must be unique: {', '.join(duplicates)}")
    return rules


def load_rules(path: Path | str | None = None) -> tuple[Rule, ...]:
    return parse_rules(Path(path or DEFAULT_RULES_PATH).read_text())
