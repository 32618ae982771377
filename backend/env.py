"""The one place Trainyard reads its configuration from the environment (12-factor)."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_UNSET = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env(name: str, default: object = _UNSET) -> str:
    """Return the variable `name`; raise ImproperlyConfigured when it is missing and required."""
    value = os.environ.get(name)
    if value is None:
        if default is _UNSET:
            raise ImproperlyConfigured(f"Set the environment variable {name}.")
        return default  # type: ignore[return-value]
    return value


def env_bool(name: str, default: bool) -> bool:
    """Read a yes/no variable; anything unrecognised is a configuration error."""
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}.")


def env_int(name: str, default: int) -> int:
    """Read an integer variable."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}.") from error


def env_float(name: str, default: float, low: float, high: float) -> float:
    """Read a number between ``low`` and ``high``."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}.") from error
    if not low <= number <= high:
        raise ImproperlyConfigured(f"{name} must be between {low} and {high}, not {value!r}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """Read a comma-separated list."""
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Read a variable that must be one of ``choices``."""
    value = os.environ.get(name, default).strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return value
