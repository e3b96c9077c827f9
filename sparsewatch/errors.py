"""Exceptions that the CLI turns into one-line messages."""


class SparsewatchError(Exception):
    """An error caused by the user's input or environment, reported without a traceback."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a database driver's error, not the SQL statement
    and parameters SQLAlchemy appends), or its type's name when it has none."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
