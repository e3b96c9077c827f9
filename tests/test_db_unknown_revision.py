"""A database written by a newer sparsewatch (a schema revision this one does not have): a clear
one-line error, and the database left as it is."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sparsewatch.storage import migrate
from sparsewatch.storage.store import Store

from sparsewatch.cli import cli
from sparsewatch.errors import SparsewatchError


def _stamp_future_revision(url: str) -> None:
    Store.open(url).dispose()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sparsewatch_alembic_version SET version_num = '9999_future'"))
    engine.dispose()


def test_an_unknown_revision_is_refused_in_one_line(database_url: str) -> None:
    _stamp_future_revision(database_url)
    with pytest.raises(SparsewatchError) as err:
        Store.open(database_url)
    message = str(err.value)
    assert "\n" not in message
    assert "'9999_future'" in message and f"'{migrate.head_revision()}'" in message
    assert "newer sparsewatch" in message
    engine = sa.create_engine(database_url)
    assert migrate.current_revision(engine) == "9999_future"
    engine.dispose()


def test_the_query_cli_reports_it_as_a_usage_error(database_url: str) -> None:
    """Alembic's own message was 'CommandError: Can't locate revision identified by ...'."""
    _stamp_future_revision(database_url)
    result = CliRunner().invoke(cli, ["alerts", "--database-url", database_url])
    assert isinstance(result.exception, SparsewatchError), result.output
    assert "schema revision '9999_future'" in str(result.exception)
