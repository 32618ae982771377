"""The CLI's side of the public REST API: where it is and who I am (the config file, or
``TRAINYARD_URL`` / ``TRAINYARD_TOKEN``), requests with the token, and errors as the API
gives them (its field messages), each with the exit code scripts can use."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

# Exit codes (besides a job's own with --wait): what a script can tell apart.
OK = 0
FAILED = 1  # the API refused (a conflict, not found, a server error) or a job action failed
BAD_INPUT = 2  # a bad manifest or flag, or field errors from the API (click's own usage code)
UNREACHABLE = 3  # no server answered at the URL
NOT_SIGNED_IN = 4  # no token, or the API says it is invalid or not enough
TIMEOUT_SECONDS = 30


class CliError(Exception):
    """A failure to tell the user, and the exit code it ends the command with."""

    def __init__(
        self, message: str, exit_code: int = FAILED, body: object = None, status: int = 0
    ) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code
        self.body, self.status = body, status  # the API's error answer, when it gave one


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainyard" / "config.json"


@dataclass
class Config:
    url: str = ""
    token: str = ""

    @classmethod
    def load(cls) -> Config:
        """The stored URL and token, each overridden by TRAINYARD_URL / TRAINYARD_TOKEN."""
        stored: dict[str, Any] = {}
        try:
            stored = json.loads(config_path().read_text())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as error:
            raise CliError(
                f"{config_path()} cannot be read ({error}); run trainyard login"
            ) from None
        return cls(
            url=(os.environ.get("TRAINYARD_URL") or stored.get("url") or "").rstrip("/"),
            token=os.environ.get("TRAINYARD_TOKEN") or stored.get("token") or "",
        )

    def save(self) -> Path:
        """Written readable by its owner only: the token is a password."""
        path = config_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "w") as out:
            json.dump({"url": self.url, "token": self.token}, out)
        partial.replace(path)
        return path


def describe_errors(body: object, names: Mapping[str, str] | None = None) -> list[str]:
    """The API's error body as lines: ``field: message`` per field, the detail on its own.
    ``names`` says what to call a field instead (the flag that gave it: ``--gpus``)."""
    names = names or {}
    if isinstance(body, dict):
        lines = []
        for field, value in body.items():
            messages = value if isinstance(value, list) else [value]
            for message in messages:
                if isinstance(message, dict):  # a nested serializer's errors
                    lines += [f"{field}.{line}" for line in describe_errors(message)]
                elif field in ("detail", "non_field_errors"):
                    lines.append(str(message))
                else:
                    lines.append(f"{names.get(field, field)}: {message}")
        return lines
    if isinstance(body, list):
        return [line for item in body for line in describe_errors(item, names)]
    return [str(body)] if body else []


class Api:
    """Requests to ``<url>/api/v1/`` with ``Authorization: Token``."""

    def __init__(self, config: Config, require_token: bool = True) -> None:
        if not config.url:
            raise CliError(
                "No Trainyard URL: run trainyard login --url URL, or set TRAINYARD_URL",
                NOT_SIGNED_IN,
            )
        if require_token and not config.token:
            raise CliError(
                "Not signed in: run trainyard login, or set TRAINYARD_TOKEN", NOT_SIGNED_IN
            )
        self.base = config.url
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"
        if config.token:
            self.session.headers["Authorization"] = f"Token {config.token}"

    def url(self, path: str) -> str:
        return path if path.startswith("http") else f"{self.base}/api/v1/{path.lstrip('/')}"

    def request(self, method: str, path: str, **options: Any) -> requests.Response:
        """The answer, or CliError with the API's messages and a fitting exit code."""
        options.setdefault("timeout", TIMEOUT_SECONDS)
        try:
            response = self.session.request(method, self.url(path), **options)
        except requests.ConnectionError as error:
            raise CliError(f"Cannot reach Trainyard at {self.base}: {error}", UNREACHABLE) from None
        except requests.Timeout:
            raise CliError(
                f"Trainyard at {self.base} did not answer in time", UNREACHABLE
            ) from None
        if response.status_code >= 400:
            raise _error_of(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None).json()

    def post(self, path: str, body: object = None, headers: dict | None = None) -> Any:
        response = self.request("POST", path, json=body or {}, headers=headers)
        return response.json() if response.content else None

    def pages(self, path: str, limit: int | None = None, **params: Any) -> Iterator[dict]:
        """The items of a paginated list, following ``next``, at most ``limit``."""
        url: str | None = self.url(path)
        query: dict | None = params
        count = 0
        while url:
            page = self.request("GET", url, params=query).json()
            query = None  # the next link carries the query
            for item in page.get("results", []):
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            url = page.get("next")


def _error_of(response: requests.Response) -> CliError:
    try:
        body = response.json()
    except ValueError:
        body = response.text.strip()[:300]
    lines = describe_errors(body) or [f"The server answered {response.status_code}."]
    code = response.status_code
    if code in (401, 403):
        exit_code = NOT_SIGNED_IN
    elif code == 400:
        exit_code = BAD_INPUT
    else:
        exit_code = FAILED
    return CliError("\n".join(lines), exit_code, body, code)
