"""Why a job attempt failed, and whether to run it again.

A failed attempt is classified from its exit code, the tail of its log and, where the
cluster backend can tell, the reason the cluster gave for the worker's end (a Kubernetes
container's ``OOMKilled``, a pod's ``Evicted``, an image that could not be pulled), by
rules read from YAML: the defaults in ``retry_rules.yaml`` next to this module, or a
deployment's own file named by ``TRAINYARD_RETRY_RULES``. The first rule that matches
decides the class; :func:`retry_decision` turns the class into what the job manager does
next, and :func:`system_requeue` covers the jobs the system itself moved (preemption, node
repair, node lost). Nothing here imports Django.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from jobmanager.backends.confine import open_job_file

logger = logging.getLogger(__name__)

RULES_ENV_VAR = "TRAINYARD_RETRY_RULES"
DEFAULT_RULES_FILE = "retry_rules.yaml"
RULE_NAME_MAX_LENGTH = 100  # JobAttempt.failure_rule
DEFAULT_LOG_TAIL_BYTES = 64 * 1024

# Linux numbering whatever the platform classifying, since jobs run on Linux.
SIGNAL_NUMBERS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGUSR1": 10,
    "SIGSEGV": 11,
    "SIGUSR2": 12,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
}
_SIGNAL_NAMES = {number: name for name, number in SIGNAL_NUMBERS.items()}

_RULE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_RULE_KEYS = (
    "name", "class", "exit_codes", "reasons", "patterns", "ignore_case", "description",
)  # fmt: skip
_REASON_RE = re.compile(r"[A-Za-z0-9*?\[\]!._/-]+")
_FILE_KEYS = ("rules", "extends_defaults")
_ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_EVIDENCE_MAX_CHARS = 160
# Reasons that say no more than the exit code (Kubernetes' for any non-zero exit).
_GENERIC_REASONS = frozenset({"", "Error", "Completed", "Failed"})


class FailureClass(StrEnum):
    """Whose fault a failure was: the values of ``backend.jobs.models.FailureClass``."""

    USER = "user"
    INFRASTRUCTURE = "infrastructure"
    PREEMPTION = "preemption"
    UNKNOWN = "unknown"


_CLASS_LABELS = {
    FailureClass.USER: "user error",
    FailureClass.INFRASTRUCTURE: "infrastructure failure",
    FailureClass.PREEMPTION: "preemption",
    FailureClass.UNKNOWN: "unknown cause",
}
# The highest exit code read as a death by signal (128+N, N at most 64 on Linux).
_LAST_SIGNAL_EXIT_CODE = 128 + 64


class RetryOn(StrEnum):
    """Which failures a job spends its retries on (its ``retry_on``).

    ``infrastructure``, the default: infrastructure failures and unknown causes; a user
    error fails the job at once, since running the same command again repeats it.
    ``any``: every failure, user errors included (a job that fails now and then by
    design, or whose errors the rules misread).
    """

    INFRASTRUCTURE = "infrastructure"
    ANY = "any"


@dataclass(frozen=True, slots=True)
class Rule:
    """One classification rule; it matches when every condition it states holds.

    ``exit_codes`` (when not empty) must contain the exit code, one of ``reasons`` (shell
    patterns, when not empty) must match the first word of the reason the cluster gave,
    and one of ``patterns`` (when not empty) must be found in the log tail or in that
    reason's text.
    """

    name: str
    failure_class: FailureClass
    exit_codes: frozenset[int] = frozenset()
    patterns: tuple[re.Pattern[str], ...] = ()
    description: str = ""
    reasons: tuple[str, ...] = ()

    def match(self, exit_code: int | None, log_tail: str, reason: str = "") -> str | None:
        """What of the attempt matched, in words for the message; None when nothing did."""
        if self.exit_codes and exit_code not in self.exit_codes:
            return None
        word = reason_word(reason)
        if self.reasons and not any(fnmatchcase(word, pattern) for pattern in self.reasons):
            return None
        evidence = [describe_exit_code(exit_code)] if self.exit_codes else []
        if self.reasons:
            evidence.append(f'the cluster: "{_shortened(reason)}"')
        if self.patterns:
            for source, text in (("log", log_tail), ("the cluster", reason)):
                found = next(
                    (m for m in (p.search(text) for p in self.patterns) if m is not None), None
                )
                if found is not None:
                    if source == "log" or not self.reasons:
                        evidence.append(f'{source}: "{_line_of(text, found)}"')
                    break
            else:
                return None
        return ", ".join(evidence)


@dataclass(frozen=True, slots=True)
class Classification:
    """The class of a failed attempt, the rule that decided it ("" when none matched), and
    a one-line explanation for the job's page."""

    failure_class: FailureClass
    rule: str
    message: str

    def __post_init__(self) -> None:
        # Accepts any str with a class's value, Django's FailureClass included.
        object.__setattr__(self, "failure_class", FailureClass(self.failure_class))


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Whether the job runs again, whether that spends one of its retries, after how long."""

    retry: bool
    spends_retry: bool
    backoff_seconds: float
    reason: str


def classify(
    exit_code: int | None,
    log_tail: str,
    rules: Sequence[Rule] | None = None,
    reason: str = "",
) -> Classification | None:
    """Classify a failed attempt by the first of ``rules`` (default :func:`load_rules`) that
    matches; "unknown" with rule "" when none does.

    No rule matching a plain non-zero exit (not a signal's 128+N) with no reason from the
    cluster beyond the exit itself is the user's: "your command exited 3". A death by
    signal, or an end with no exit code, stays "unknown": something outside the job may
    have caused it.

    Exit code 0 is not a failure: the answer is None, unless the cluster gave a
    ``reason`` for the end ("OOMKilled", or "ImagePullBackOff: Back-off pulling image
    ..." for a worker that never started): a word, then ": " and its message. ``None``
    means no exit code is known (rules with exit codes then never match). A negative code,
    as Python's ``subprocess`` reports a death by signal N, is read as the shell's 128+N.
    """
    if exit_code == 0 and not reason:
        return None
    exit_code = normalize_exit_code(exit_code)
    text = _clean_log(log_tail)
    reason = " ".join((reason or "").split())
    for rule in load_rules() if rules is None else rules:
        evidence = rule.match(exit_code, text, reason)
        if evidence is not None:
            label = f"{_CLASS_LABELS[rule.failure_class]} ({rule.name})"
            parts = [rule.description, evidence]
            return Classification(
                rule.failure_class, rule.name, f"{label}: " + "; ".join(p for p in parts if p)
            )
    if reason in _GENERIC_REASONS and exited_by_itself(exit_code):
        return Classification(
            FailureClass.USER,
            "",
            f"user error: your command exited {exit_code} and its log shows no "
            "infrastructure fault",
        )
    said = f' (the cluster: "{_shortened(reason)}")' if reason not in _GENERIC_REASONS else ""
    return Classification(
        FailureClass.UNKNOWN,
        "",
        f"unknown cause: {describe_exit_code(exit_code)}{said} and the log matched no rule",
    )


def exited_by_itself(exit_code: int | None) -> bool:
    """Whether the job's command ended with an exit code of its own choosing: not by a
    signal (128+N), and not without a known code (a worker that vanished)."""
    return (
        exit_code is not None and exit_code > 0 and not (128 < exit_code <= _LAST_SIGNAL_EXIT_CODE)
    )


def reason_word(reason: str) -> str:
    """The word a cluster's reason starts with: "OOMKilled" of "OOMKilled", "ErrImagePull"
    of "ErrImagePull: rpc error: ..."."""
    return (reason or "").split(":", 1)[0].strip()


def retry_decision(
    classification: Classification,
    retries_used: int,
    max_retries: int,
    base_backoff_seconds: float = 30,
    max_backoff_seconds: float = 1800,
    retry_on: RetryOn | str = RetryOn.INFRASTRUCTURE,
) -> RetryDecision:
    """What to do after a failed attempt.

    User errors are not retried, unless ``retry_on`` is "any". The other failures are
    retried while ``retries_used < max_retries``, each retry spending one, after
    ``base_backoff_seconds * 2**retries_used`` capped at ``max_backoff_seconds``.
    Preemption requeues at once and spends nothing.

    The reason is one line for the job's page: what happened (the classification's
    message, else its class and rule), then whether and why it runs again.
    """
    if retries_used < 0 or max_retries < 0:
        raise ValueError("retries_used and max_retries must not be negative")
    if base_backoff_seconds < 0 or max_backoff_seconds < 0:
        raise ValueError("backoff seconds must not be negative")
    failure_class = FailureClass(classification.failure_class)
    cause = classification.message or _CLASS_LABELS[failure_class] + (
        f" ({classification.rule})" if classification.rule else ""
    )
    if failure_class == FailureClass.PREEMPTION:
        return RetryDecision(True, False, 0.0, f"{cause}; requeued without spending a retry")
    if failure_class == FailureClass.USER and RetryOn(retry_on) != RetryOn.ANY:
        return RetryDecision(
            False, False, 0.0, f"{cause}; not retried: a retry would repeat it (retry_on: any "
            "retries user errors too)"
        )  # fmt: skip
    if retries_used >= max_retries:
        used = "the job allows no retries" if max_retries == 0 else f"all {max_retries} used"
        return RetryDecision(False, False, 0.0, f"{cause}; not retried: {used}")
    # Past 2**64 the product only matters as "more than the cap"; avoid float overflow.
    uncapped = base_backoff_seconds * 2**retries_used if retries_used < 64 else float("inf")
    backoff = float(min(uncapped, max_backoff_seconds))
    return RetryDecision(
        True,
        True,
        backoff,
        f"{cause}; retry {retries_used + 1} of {max_retries} in {backoff:g} s",
    )


def system_requeue(reason: str) -> RetryDecision:
    """The system moved a running job (preemption, node repair, node lost): requeue it at
    once without spending a retry. ``reason`` says what happened, for the job's page.

    The attempt is still stored with one of the four classes: "preemption" for a move the
    system chose, "infrastructure" for a node that was lost.
    """
    what = " ".join(reason.split()) or "moved by the system"
    return RetryDecision(True, False, 0.0, f"{what}; requeued without spending a retry")


def read_log_tail(path: str | os.PathLike[str], max_bytes: int = DEFAULT_LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a log file as text, read without reading the rest.

    Undecodable bytes become U+FFFD. A line cut by the start of the window is dropped
    unless it is all there is. A missing file gives ""; so does an unreadable one (with a
    warning), since a failure must be classified even when its log is gone.
    """
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    try:
        # A job owns its log directory: no link, FIFO or second name is followed.
        with open_job_file(os.fspath(path)) as log:
            size = log.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            log.seek(start)
            data = log.read(max_bytes)
    except FileNotFoundError:
        return ""
    except OSError as error:
        logger.warning("cannot read the log tail of %s: %s", path, error)
        return ""
    if start > 0:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1 :]
    return data.decode("utf-8", errors="replace")


def normalize_exit_code(exit_code: int | None) -> int | None:
    """An exit code as a shell reports it: death by signal N is 128+N, not -N."""
    if exit_code is not None and exit_code < 0:
        return 128 - exit_code
    return exit_code


def describe_exit_code(exit_code: int | None) -> str:
    if exit_code is None:
        return "no exit code"
    signal_name = _SIGNAL_NAMES.get(exit_code - 128)
    return f"exit code {exit_code}" + (f" ({signal_name})" if signal_name else "")


# ---- rules ---------------------------------------------------------------------------


def load_rules(path: str | os.PathLike[str] | None = None) -> tuple[Rule, ...]:
    """The rules in force: those of ``path``, else of the file ``$TRAINYARD_RETRY_RULES``
    names, else the defaults. A file is parsed again only once it has changed.

    Raises ValueError for a file that is missing, unreadable or invalid.
    """
    if path is None:
        path = os.environ.get(RULES_ENV_VAR) or None
        if path is None:
            return default_rules()
    rules_file = Path(path)
    try:
        stat = rules_file.stat()
    except OSError as error:
        raise ValueError(
            f"retry rules file {rules_file} (from {RULES_ENV_VAR}?) cannot be read: "
            f"{error.strerror}"
        ) from error
    return _load_rules_file(str(rules_file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=1)
def default_rules() -> tuple[Rule, ...]:
    """The rules of ``jobmanager/retry_rules.yaml``."""
    text = resources.files("jobmanager").joinpath(DEFAULT_RULES_FILE).read_text("utf-8")
    rules, extends_defaults = _parse_document(text, f"default {DEFAULT_RULES_FILE}")
    if extends_defaults:
        raise ValueError(f"default {DEFAULT_RULES_FILE}: extends_defaults makes no sense here")
    return rules


@lru_cache(maxsize=8)
def _load_rules_file(path: str, mtime_ns: int, size: int) -> tuple[Rule, ...]:
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"retry rules file {path} cannot be read: {error}") from error
    return parse_rules(text, source=path)


def parse_rules(text: str, source: str = "retry rules") -> tuple[Rule, ...]:
    """The rules a YAML document defines, merged with the defaults when it says
    ``extends_defaults: true``: its new rules come first, and one named like a default
    takes that default's place. ``source`` names the document in errors.
    """
    rules, extends_defaults = _parse_document(text, source)
    if not extends_defaults:
        return rules
    defaults = default_rules()
    default_names = {rule.name for rule in defaults}
    own_by_name = {rule.name: rule for rule in rules}
    added = tuple(rule for rule in rules if rule.name not in default_names)
    return added + tuple(own_by_name.get(rule.name, rule) for rule in defaults)


def _parse_document(text: str, source: str) -> tuple[tuple[Rule, ...], bool]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{source}: not valid YAML: {error}") from error
    if not isinstance(document, Mapping):
        raise ValueError(f"{source}: expected a mapping with a 'rules' list at the top")
    _reject_unknown_keys(document, _FILE_KEYS, source)
    extends_defaults = document.get("extends_defaults", False)
    if not isinstance(extends_defaults, bool):
        raise ValueError(f"{source}: 'extends_defaults' must be true or false")
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list):
        raise ValueError(f"{source}: 'rules' must be a list of rules")
    rules = tuple(_parse_rule(raw, number, source) for number, raw in enumerate(raw_rules, 1))
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise ValueError(f"{source}: rule {rule.name!r}: field 'name': used twice")
        seen.add(rule.name)
    return rules, extends_defaults


def _parse_rule(raw: Any, number: int, source: str) -> Rule:
    where = f"{source}: rule #{number}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping with 'name' and 'class'")
    name = raw.get("name")
    if name is None:
        raise ValueError(f"{where}: field 'name' is missing")
    if (
        not isinstance(name, str)
        or not _RULE_NAME_RE.fullmatch(name)
        or len(name) > RULE_NAME_MAX_LENGTH
    ):
        raise ValueError(
            f"{where}: field 'name': {name!r} is not a name (letters, digits, '_.:-', "
            f"at most {RULE_NAME_MAX_LENGTH} characters)"
        )
    where = f"{source}: rule {name!r}"
    _reject_unknown_keys(raw, _RULE_KEYS, where)

    failure_class = raw.get("class")
    if failure_class is None:
        raise ValueError(f"{where}: field 'class' is missing")
    try:
        failure_class = FailureClass(failure_class)
    except ValueError:
        raise ValueError(
            f"{where}: field 'class': unknown class {failure_class!r} "
            f"(expected one of {', '.join(FailureClass)})"
        ) from None

    exit_codes = frozenset(
        _parse_exit_code(code, where) for code in _list(raw, "exit_codes", where)
    )
    reasons = tuple(_parse_reason(reason, where) for reason in _list(raw, "reasons", where))

    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        raise ValueError(f"{where}: field 'ignore_case' must be true or false")
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    patterns = tuple(_compile(p, flags, where) for p in _list(raw, "patterns", where))
    if not exit_codes and not patterns and not reasons:
        raise ValueError(
            f"{where}: needs 'exit_codes', 'reasons' or 'patterns' (it would match anything)"
        )

    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"{where}: field 'description' must be text")
    return Rule(name, failure_class, exit_codes, patterns, " ".join(description.split()), reasons)


def _parse_reason(reason: Any, where: str) -> str:
    if isinstance(reason, str) and _REASON_RE.fullmatch(reason):
        return reason
    raise ValueError(
        f"{where}: field 'reasons': {reason!r} is not a reason (a word such as OOMKilled, "
        "or a shell pattern such as 'OutOf*')"
    )


def _list(raw: Mapping[str, Any], field: str, where: str) -> list[Any]:
    values = raw.get(field)
    if values is None:
        return []
    if not isinstance(values, list):
        raise ValueError(f"{where}: field {field!r} must be a list")
    return values


def _parse_exit_code(code: Any, where: str) -> int:
    if isinstance(code, str) and code.upper() in SIGNAL_NUMBERS:
        return 128 + SIGNAL_NUMBERS[code.upper()]
    if isinstance(code, int) and not isinstance(code, bool) and 1 <= code <= 255:
        return code
    raise ValueError(
        f"{where}: field 'exit_codes': {code!r} is not an exit code from 1 to 255 or a "
        f"signal name ({', '.join(SIGNAL_NUMBERS)})"
    )


def _compile(pattern: Any, flags: int, where: str) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{where}: field 'patterns': {pattern!r} is not a regular expression")
    try:
        return re.compile(pattern, flags)
    except re.error as error:
        raise ValueError(
            f"{where}: field 'patterns': bad regular expression {pattern!r}: {error}"
        ) from None


def _reject_unknown_keys(raw: Mapping[Any, Any], known: Iterable[str], where: str) -> None:
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise ValueError(
            f"{where}: unknown field {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
        )


# ---- log text ------------------------------------------------------------------------


def _clean_log(log_tail: str) -> str:
    """Colour codes removed, and carriage returns (progress bars) read as line ends, so that
    patterns and ^ / $ see the lines a person sees."""
    return _ANSI_ESCAPE_RE.sub("", log_tail or "").replace("\r\n", "\n").replace("\r", "\n")


def _shortened(text: str) -> str:
    return text if len(text) <= _EVIDENCE_MAX_CHARS else text[: _EVIDENCE_MAX_CHARS - 1] + "…"


def _line_of(text: str, found: re.Match[str]) -> str:
    """The line holding a match, whitespace collapsed, shortened around the match."""
    line_start = text.rfind("\n", 0, found.start()) + 1
    line_end = text.find("\n", found.end())
    if line_end == -1:
        line_end = len(text)
    if line_end - line_start <= _EVIDENCE_MAX_CHARS:
        return " ".join(text[line_start:line_end].split())
    begin = max(line_start, min(found.start() - 40, line_end - _EVIDENCE_MAX_CHARS))
    finish = begin + _EVIDENCE_MAX_CHARS
    snippet = " ".join(text[begin:finish].split())
    return ("…" if begin > line_start else "") + snippet + ("…" if finish < line_end else "")
