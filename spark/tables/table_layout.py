"""A table's layout: ``bucket(first key column, N)`` partitions and a sort order on the key.

Bucketing bounds a change batch's rewrite: a touched key can only live in its bucket's files,
whatever the key distribution (hot or uniform), and the planner (``files.py``) prunes on the
files' bucket values even though hashing spreads every bucket's key range over the whole domain.
Sorting by the key keeps each file's key bounds tight.

Composite keys are bucketed by their first column: every row of one full key has the same first
column, so the key's bucket is known from the key alone, and N^k partitions of a k-column bucket
spec would be mostly tiny files. A first column of few distinct values (e.g. a tenant id) makes
buckets uneven; put the most selective column first upstream or keep the table unbucketed.
Key-less tables and first key columns bucket cannot hash (float, double, boolean) stay
unpartitioned. ``buckets = 0`` (the default) is today's layout: unpartitioned and unsorted.

A table whose key changes (CREATE TABLE over a dropped one, ALTER TABLE ... PRIMARY KEY) is laid
out again for the new key (``lay_out``): new files follow the new spec and sort order, files
already written keep theirs. Caveat: Iceberg refuses to drop a column the default partition spec
or sort order uses, and pyiceberg 0.12 cannot read manifests of a spec whose source column is gone
while they hold live files: dropping a column a bucket spec of live files uses is refused
(``updates._stop_laying_out_by``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform

from spark.tables import internals
from spark.tables.errors import LayoutUnavailable

# A fixed partition field name: upstream column names are data and stay out of partition paths.
# Iceberg refuses a partition field named like a column: where an upstream column has this name,
# it takes one more leading underscore per such column (``bucket_field_name``).
BUCKET_FIELD = "_tidelake_key_bucket"
_FIRST_PARTITION_FIELD_ID = 1000  # Iceberg's convention: partition field ids start at 1000


def table_layout(schema: Schema, key_columns: Sequence[str], buckets: int) -> tuple[PartitionSpec, SortOrder]:
    """The partition spec and sort order of a new table with ``key_columns`` and ``buckets``.

    Raises:
        LayoutUnavailable: the layout buckets but pyiceberg-core (needed to write it) is missing.
    """
    if buckets <= 0 or not key_columns:
        return UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER
    fields = [schema.find_field(k) for k in key_columns]
    sort_order = SortOrder(*[SortField(source_id=f.field_id, transform=IdentityTransform()) for f in fields])
    if not BucketTransform(buckets).can_transform(fields[0].field_type):
        return UNPARTITIONED_PARTITION_SPEC, sort_order
    if not internals.pyiceberg_core_available():
        raise LayoutUnavailable(
            f"[layout] buckets = {buckets}: writing bucket({fields[0].name}, {buckets}) partitions needs pyiceberg-core; "
            "install pyiceberg[pyiceberg-core] (pinned with pyiceberg) or set buckets = 0"
        )
    spec = PartitionSpec(PartitionField(source_id=fields[0].field_id, field_id=_FIRST_PARTITION_FIELD_ID,
                                        transform=BucketTransform(buckets), name=bucket_field_name(schema)))
    return spec, sort_order



def bucket_field_name(schema: Schema) -> str:
    """``BUCKET_FIELD``, with one more leading underscore per column of ``schema`` that has it (ignoring case)."""
    taken = {f.name.casefold() for f in schema.fields}
    name = BUCKET_FIELD
    while name.casefold() in taken:
        name = "_" + name
    return name


def lay_out(tx: Transaction, key_columns: Sequence[str], buckets: int) -> None:
    """Stage the default partition spec and sort order ``table_layout`` gives a new table of ``tx``'s
    current schema with ``key_columns`` (nothing staged when the table has them already).
    ``key_columns`` empty clears the layout (unpartitioned, unsorted), e.g. before the columns of
    the old key go.

    Raises:
        LayoutUnavailable: see ``table_layout``.
    """
    spec, order = table_layout(tx.table_metadata.schema(), key_columns, buckets)
    internals.set_layout(tx, spec, order)
