"""The workers' logs: one JSON object per line, on stderr, from every process and library."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

RDKAFKA_LOGGER = logging.getLogger("sparsewatch.rdkafka")
"""Where the Kafka client library's own log lines go (``logger`` in its configuration): through
the handlers below instead of raw ``%3|...|FAIL|`` lines on stderr."""


class JsonLines(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, thread, message, and the
    traceback if any. A ``%``-format template broke the JSON on a quote or a newline in a
    message (a database error quotes its host) and put a logged exception's traceback on lines
    of its own.

    ``thread`` says which worker a line comes from where one process runs several (``sparsewatch
    run all``): its thread is named after it (``detector``, ``anomaly``), its writer
    ``<worker>-writer`` (a child process or a thread); a retry line, a consumer error or a
    writer's line said nothing of its worker."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str | int) -> None:
    """JSON lines at ``level`` (a name or a number) on stderr (Alembic's migration chatter at
    WARNING), Python's warnings among them (logger ``py.warnings``): a library's warning, such as
    scikit-learn's ``ConvergenceWarning`` when the anomaly worker's OC-SVM fit stops at its
    iteration bound, was written to stderr as two lines of plain text."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines())
    logging.basicConfig(
        level=level.upper() if isinstance(level, str) else level, handlers=[handler]
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.captureWarnings(True)
