"""sparsewatch.storage: the SQL store of results, checkpoints and offsets.

* :mod:`~sparsewatch.storage.store`: :class:`Store` / :class:`StoreTx` / :class:`Checkpoint`, the
  API the workers call (one transaction per window, idempotent natural-key writes);
* :mod:`~sparsewatch.storage.document_columns`: a window's per-document results as columns;
* :mod:`~sparsewatch.storage.values`: Python values for nullable, JSON and NOT NULL columns;
* the read side behind the query commands and the demo, one module per kind of row:
  :mod:`~sparsewatch.storage.alert_queries` (and :mod:`~sparsewatch.storage.alert_follower`),
  :mod:`~sparsewatch.storage.document_queries`, :mod:`~sparsewatch.storage.window_queries`,
  :mod:`~sparsewatch.storage.snapshot_queries`, :mod:`~sparsewatch.storage.dead_letter_queries`,
  :mod:`~sparsewatch.storage.status_queries`; what they share in
  :mod:`~sparsewatch.storage.query_parts` and :mod:`~sparsewatch.storage.text_match`;
* :mod:`~sparsewatch.storage.schema`, :mod:`~sparsewatch.storage.types`: tables and portable types;
* :mod:`~sparsewatch.storage.migrate` and ``migrations/``: Alembic, run from code;
* :mod:`~sparsewatch.storage.serialization`: npz blobs without pickle;
* :mod:`~sparsewatch.storage.engine`, :mod:`~sparsewatch.storage.bulk`: engines and fast writes.
"""
