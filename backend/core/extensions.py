"""What an app above adds to a lower app, which may not import it (docs/architecture.md).

Apps point down: the VCs' app may not import jobs, yet a VC's answer shows its jobs' use;
the clusters' app may not import the job manager's, yet deleting a node drains its jobs.
So the lower app declares an extension point, and the app above registers on it in its
``AppConfig.ready()``, before any request is served:

- ``AnswerFields``: read-only fields added to one kind of API answer (and to its schema);
  ``backend.core.fields.ExtensibleSerializer`` shows them;
- ``Hook``: the one function doing a step that only an app above knows how to do.

Both are plain objects with no DRF in them, so registering loads nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from rest_framework.fields import Field
    from rest_framework.request import Request

M = TypeVar("M")  # the model an answer is about
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class AnswerField(Generic[M]):
    """A read-only field that an app above adds to a lower app's answers about M."""

    name: str
    # A new read-only field describing the value: the API schema shows it.
    schema: Callable[[], Field]
    # Called once per answer with its request (None outside one): gives each object's value.
    values: Callable[[Request | None], Callable[[M], object]]
    # The field it follows in the answer (None: last), so that the answer keeps its order.
    after: str | None = None


class AnswerFields(Generic[M]):
    """The fields added to one kind of answer, in the order they were registered."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self._fields: dict[str, AnswerField[M]] = {}

    def register(self, field: AnswerField[M]) -> None:
        """Add the field; registering the same one again changes nothing."""
        registered = self._fields.setdefault(field.name, field)
        if registered != field:
            raise ImproperlyConfigured(f"{self.answer} has a field {field.name!r} already.")

    def __iter__(self) -> Iterator[AnswerField[M]]:
        return iter(list(self._fields.values()))


class Hook(Generic[F]):
    """One step a lower app leaves to the one app above that knows how to do it."""

    def __init__(self, step: str) -> None:
        self.step = step
        self._function: F | None = None

    def register(self, function: F) -> None:
        """Name the function doing the step; registering the same one again changes nothing."""
        if self._function is not None and self._function != function:
            raise ImproperlyConfigured(f"{self.step}: {self._function!r} is registered already.")
        self._function = function

    @property
    def function(self) -> F:
        """The registered function; ImproperlyConfigured where the app doing it is missing."""
        if self._function is None:
            raise ImproperlyConfigured(f"Nothing is registered to do {self.step}.")
        return self._function
