"""The one exception the backends raise for problems a user can act on."""

from __future__ import annotations


class BackendError(Exception):
    """A model that cannot be lowered, compiled, saved or run as asked; the message says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
