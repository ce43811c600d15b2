"""What an executor needs to read and write one table's files, as plain picklable values.

A ``Table`` holds a catalog connection and the whole snapshot history; neither should travel
to a Spark task. A ``TableTarget`` is the table's metadata with the history stripped (schema,
partition specs, sort orders, properties, location: all that file reading and writing uses)
plus the FileIO properties, rebuilt into pyiceberg objects on the executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil


@dataclass(frozen=True)
class TableTarget:
    name: str
    metadata_json: str = field(repr=False)
    # FileIO properties may hold storage credentials: never printed.
    io_properties: Mapping[str, str] = field(repr=False)

    @staticmethod
    def of(table: Table) -> TableTarget:
        return TableTarget.from_metadata(".".join(table.name()), table.metadata, table.io.properties)

    @staticmethod
    def from_metadata(name: str, metadata: TableMetadata, io_properties: Mapping[str, str]) -> TableTarget:
        bare = metadata.model_copy(update={
            "snapshots": [], "refs": {}, "current_snapshot_id": None, "snapshot_log": [], "metadata_log": [],
            "statistics": [], "partition_statistics": [],
        })
        return TableTarget(name, bare.model_dump_json(), dict(io_properties))

    def metadata(self) -> TableMetadata:
        return TableMetadataUtil.parse_raw(self.metadata_json)

    def io(self) -> FileIO:
        return load_file_io(dict(self.io_properties), self.metadata().location)
