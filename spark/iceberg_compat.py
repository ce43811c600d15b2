"""The pyiceberg internals tidelake relies on, wrapped here and nowhere else.

pyiceberg (0.12) has no public way to write a snapshot with a schema other than the
table's current one, but a repaired tag must keep the schema it had at its W (a later
ADD COLUMN must not appear in an older tag). ``tests/spark/test_iceberg_compat.py`` pins
the behaviour used here, so an upgrade that changes it fails there, loudly, first.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from pyiceberg.table import Transaction
from pyiceberg.table.update import SetCurrentSchemaUpdate

from cdc_codecs import TidelakeError


class IcebergCompatError(TidelakeError):
    """The installed pyiceberg no longer offers what tidelake's wrapper of its internals needs."""


@contextmanager
def writing_with_schema(tx: Transaction, schema_id: int) -> Iterator[None]:
    """Snapshots staged inside the block carry schema ``schema_id``; the current schema is restored after.

    pyiceberg stamps a snapshot with the transaction's current schema and writes data files
    with it, so the block makes ``schema_id`` current for its duration: two
    ``set-current-schema`` updates around the writes, committed with them in one transaction
    (readers never see the older schema as current).

    Raises:
        IcebergCompatError: the schema does not exist, or pyiceberg's internals changed.
    """
    stage = getattr(tx, "_stage", None)
    if stage is None:
        raise IcebergCompatError("pyiceberg's Transaction has no _stage(): spark/iceberg_compat.py needs updating "
                                 "for this pyiceberg version")
    current = tx.table_metadata.current_schema_id
    if tx.table_metadata.schema_by_id(schema_id) is None:
        raise IcebergCompatError(f"table {tx._table.name()} has no schema {schema_id} to write with")
    stage((SetCurrentSchemaUpdate(schema_id=schema_id),))
    try:
        yield
    finally:
        stage((SetCurrentSchemaUpdate(schema_id=current),))
