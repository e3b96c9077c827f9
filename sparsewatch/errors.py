"""Exceptions that the CLI turns into one-line messages."""


class SparsewatchError(Exception):
    """An error caused by the user's input or environment, reported without a traceback."""
