"""The fold's reference: per key, its greatest change, row by row in plain Python (tests only)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from spark.fold.net_change import GROUP_COLUMNS


def greatest_per_key(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The first row of every group of sorted ``batches`` (groups may span batches): ``greatest``'s
    rule batch by batch, on rows already in ``sort_for_fold``'s order, one row at a time."""
    last: object = None
    for batch in batches:
        if not batch.num_rows:
            continue
        first = []
        for group in zip(*(batch.column(c).to_pylist() for c in GROUP_COLUMNS)):
            first.append(group != last)
            last = group
        yield batch.filter(pa.array(first, pa.bool_()))
