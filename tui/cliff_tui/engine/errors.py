"""User-facing failures: each carries one line that says what is wrong and what to do."""


class CliffError(Exception):
    """A problem the user can fix; ``str()`` is the one line to show."""

    kind = "error"


class BadInput(CliffError):
    kind = "bad_input"


class DoesNotFit(CliffError):
    """The context could not be allocated: a data point for triangulation, not a crash."""

    kind = "does_not_fit"

    def __init__(self, message: str, n_ctx: int | None = None) -> None:
        super().__init__(message)
        self.n_ctx = n_ctx


class Cancelled(CliffError):
    kind = "cancelled"
