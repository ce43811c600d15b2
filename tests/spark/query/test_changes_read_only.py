"""A downstream team with read-only credentials on the archive and the catalog reads the change
feed (contract §8): the feed never writes change logs or clock files without the pipeline's lease,
and where it would have to (a window decoded by an older decoder version) it says what to run.

The archive is SeaweedFS with a read-only identity (``S3Service.reader_key``: Read and List only);
the catalog an SQLite file opened read-only (``mode=ro``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from spark.archive.storage import open_storage
from spark.config import CatalogConfig, StorageConfig
from spark.decode.topic_clock import topic_clock_path
from spark.query import changes_log
from spark.query.changes import ChangesNeedDecoding, read_changes
from spark.tables import catalog as cat

from tests.spark.archives import ArchiveWriter
from tests.spark.query.test_changes import Lake, rows

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def _s3_lake(tmp: Path, s3, bucket: str) -> Lake:  # noqa: ANN001
    lake = Lake(tmp, "canal-json")
    catalog = CatalogConfig("sql", None, {"uri": f"sqlite:///{tmp / 'catalog.db'}"})
    storage = StorageConfig(f"s3://{bucket}/lake", s3.endpoint, None, s3.access_key, s3.secret_key)
    lake.config = dataclasses.replace(lake.config, storage=storage, catalog=catalog)
    lake.storage = open_storage(storage)
    lake.writer = ArchiveWriter(lake.config, lake.storage, {"cdc": lake.partitions})
    return lake


def _reader(lake: Lake, s3, tmp: Path):  # noqa: ANN001, ANN202
    storage = dataclasses.replace(lake.config.storage, access_key_id=s3.reader_key, secret_access_key=s3.reader_secret)
    catalog = CatalogConfig("sql", None, {"uri": f"sqlite:///file:{tmp / 'catalog.db'}?mode=ro&uri=true"})
    return dataclasses.replace(lake.config, storage=storage, catalog=catalog)


def _objects(s3, bucket: str) -> set[str]:  # noqa: ANN001
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def test_a_reader_with_read_only_credentials_reads_the_feed_and_writes_nothing(tmp_path: Path, s3, bucket,
                                                                               monkeypatch) -> None:
    lake = _s3_lake(tmp_path, s3, bucket)
    t = lake.create("t", [("id", "int"), ("v", "int")])
    lake.insert(t, id=1, v=1)
    w1 = lake.publish()
    t_up = lake.update(t, {"id": 1, "v": 1}, {"id": 1, "v": 10})
    w2 = lake.publish()
    # The topic's clock record gone (a pipeline older than it): the reader decides as a run would, records nothing.
    lake.storage.delete(topic_clock_path(lake.config.name, "cdc"))
    cat.close_catalogs()
    reader = _reader(lake, s3, tmp_path)
    with pytest.raises(Exception, match="(?i)access.?denied"):
        open_storage(reader.storage).write("probe", b"x")  # the credentials really are read-only
    before = _objects(s3, bucket)
    for images in (True, False):
        changes = read_changes(reader, w1, w2, before_images=images)
        expected = [("update_before", t_up, {"id": 1, "v": 1}), ("update_after", t_up, {"id": 1, "v": 10})] if images \
            else [("upsert", t_up, {"id": 1, "v": 10})]
        assert rows(changes, "t") == expected
    assert read_changes(reader, 0, w2)[("shop", "t")].num_rows == 1
    assert _objects(s3, bucket) == before

    # A window no decoder of this version decoded (an upgrade bumped it): decoding writes change
    # logs, which needs the pipeline's lease; the reader cannot take it and is told what to run.
    monkeypatch.setattr(changes_log, "undecoded", lambda *a: [(("cdc", 0), dataclasses.make_dataclass(
        "S", ["start"])(7))])
    with pytest.raises(ChangesNeedDecoding, match=r"not decoded by this tidelake's decoders.*the first cdc/0@7.*"
                                                  r"could not take.*AccessDenied.*tidelake changes --config"):
        read_changes(reader, w1, w2)
    assert _objects(s3, bucket) == before
    # With the pipeline's own credentials it decodes under the lease, and lets the lease go.
    cat.close_catalogs()
    assert rows(read_changes(lake.config, w1, w2), "t")[1] == ("update_after", t_up, {"id": 1, "v": 10})
    from spark.archive.lease import Lease

    with Lease(lake.storage, lake.config.name):  # free again
        pass
