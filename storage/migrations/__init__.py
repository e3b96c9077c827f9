"""Alembic migrations of the sparsewatch schema (driven by :mod:`sparsewatch.storage.migrate`)."""
