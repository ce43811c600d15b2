"""Merge-on-read's small files merged into the files a run writes (``upsert.small_file_merges``).

Batch after batch through the executors' path (route, group, rewrite) and one commit each, against
a plain dict of the rows every key should hold: the table reads exactly the dict after every batch,
unpartitioned and bucketed, and equal batches leave about log2(batches) small files, not one each.
"""

from __future__ import annotations

import dataclasses
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.transforms import BucketTransform

from cdc_codecs import Op
from spark.tables import files, internals
from spark.tables.schema_map import iceberg_schema, metadata_property
from spark.write import upsert
from spark.write.target import TableTarget
from spark.write.upsert import UpsertTarget

from .test_route import COLUMNS, _apply, _groups, _net

TARGET_FILE_SIZE = 128 * 1024 * 1024  # every file of these tests is small
BUCKETED = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="b"))


def _table(catalog, name: str, spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC):  # noqa: ANN001, ANN202
    schema = iceberg_schema(list(COLUMNS.items()))
    return catalog.create_table(f"ns.{name}", schema, partition_spec=spec,
                                properties={**metadata_property(schema), "format-version": "2"})


def _target(table, upserts: int, merge: bool = True) -> UpsertTarget:  # noqa: ANN001
    head = table.current_snapshot()
    live = files.live_files(table.io, head) if head is not None else files.LiveFiles((), {})
    merged = upsert.small_file_merges(table.metadata, live.data, ("id",), upserts, TARGET_FILE_SIZE) if merge else ()
    target = UpsertTarget(TableTarget.of(table), live.data, ("id",), deletes=tuple(live.deletes_of(f) for f in live.data),
                          merge_on_read=True, merged=merged, upserts=upserts)
    return dataclasses.replace(target, costs=upsert.group_costs(target, table.metadata))


def _commit(table, changes: list[tuple[Op, dict]], merge: bool = True) -> UpsertTarget:  # noqa: ANN001
    target = _target(table, sum(op is not Op.DELETE for op, _ in changes), merge)
    head = table.current_snapshot()
    rewrites = _apply(_net(changes), target)
    internals.commit_overwrite(
        table, expected_snapshot_id=head.snapshot_id if head is not None else None,
        removed=[r.removed for r in rewrites if r.removed is not None], added=[f for r in rewrites for f in r.added],
        deletes_added=[d for r in rewrites for d in r.deletes_added], deletes_removed=[d for r in rewrites for d in r.deletes_removed])
    table.refresh()
    return target


def _row(key: int, version: int) -> dict:
    return {"id": key, "name": f"v{version}", "amount": Decimal(f"{version}.00")}


def _reads(table) -> dict:  # noqa: ANN001
    rows = table.scan(selected_fields=("id", "name", "amount")).to_arrow().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key is live twice"
    return {r["id"]: r for r in rows}


def _live_files(table) -> tuple:  # noqa: ANN001
    return files.live_files(table.io, table.current_snapshot())


def test_the_tiers_merge_the_smallest_files_while_the_rows_merged_so_far_hold_as_many(catalog) -> None:
    table = _table(catalog, "tiers")
    for size in (40, 10, 20, 300):  # four files of these many rows, one commit each, merging nothing
        start = len(_reads(table))
        _commit(table, [(Op.INSERT, _row(k, 0)) for k in range(start, start + size)], merge=False)
    data = _live_files(table).data
    by_rows = {f.record_count: i for i, f in enumerate(data)}
    merged = upsert.small_file_merges(table.metadata, data, ("id",), 10, TARGET_FILE_SIZE)
    # 10 written: the 10-row file (10 <= 10), then the 20 (<= 20), then the 40 (<= 40); not the 300 (> 80).
    assert sorted(merged) == sorted(by_rows[n] for n in (10, 20, 40))
    assert upsert.small_file_merges(table.metadata, data, ("id",), 9, TARGET_FILE_SIZE) == ()
    assert upsert.small_file_merges(table.metadata, data, ("id",), 0, TARGET_FILE_SIZE) == ()
    # No file is small under a target of a few bytes: none is merged, however many rows are written.
    assert upsert.small_file_merges(table.metadata, data, ("id",), 10_000, 8) == ()


def test_a_merged_file_s_keys_drop_in_the_write_group_which_replaces_the_file(catalog) -> None:
    table = _table(catalog, "one")
    _commit(table, [(Op.INSERT, _row(k, 0)) for k in range(1, 4)])
    changes = [(Op.UPDATE, _row(2, 1)), (Op.DELETE, {"id": 3}), (Op.INSERT, _row(9, 1)), (Op.INSERT, _row(8, 1))]
    assert _target(table, 2).merged == ()  # 3 rows written and merged so far would hold fewer than the file
    target = _target(table, 3)
    assert target.merged == (0,)
    groups = _groups(upsert.route(_net(changes), target))
    assert set(groups) == {"p"}  # the drops go where the rows are written, not to a group of the file's own
    rewrites = _apply(_net(changes), target)
    (merged,) = rewrites
    assert merged.removed == target.files[0] and merged.rows_dropped == 2 and merged.rows_kept == 1
    assert not merged.deletes_added and sum(f.record_count for f in merged.added) == 4
    _commit(table, changes)
    assert _reads(table) == {1: _row(1, 0), 2: _row(2, 1), 8: _row(8, 1), 9: _row(9, 1)}
    assert [f.record_count for f in _live_files(table).data] == [4] and not _live_files(table).deletes


def test_a_file_of_another_spec_is_never_merged(catalog) -> None:
    table = _table(catalog, "specs")
    _commit(table, [(Op.INSERT, _row(k, 0)) for k in range(10)])
    with table.update_spec() as spec:
        spec.add_field("id", BucketTransform(4), "b")
    table.refresh()
    assert upsert.small_file_merges(table.metadata, _live_files(table).data, ("id",), 100, TARGET_FILE_SIZE) == ()


@pytest.mark.parametrize("spec", [UNPARTITIONED_PARTITION_SPEC, BUCKETED], ids=["unpartitioned", "bucketed"])
@pytest.mark.parametrize("keys", ["uniform", "hot"])
def test_batch_after_batch_the_table_reads_the_model_and_small_files_stay_few(catalog, spec, keys) -> None:
    table = _table(catalog, f"t_{keys}_{len(spec.fields)}")
    rng = random.Random(f"{keys}-{len(spec.fields)}")
    model: dict[int, dict] = {}
    next_key = 0
    batches = 16
    for version in range(1, batches + 1):
        changes: list[tuple[Op, dict]] = []
        live = sorted(model)
        pool = live if keys == "uniform" else live[-40:]
        touched = rng.sample(pool, min(len(pool), 12))
        for key in touched[:8]:
            changes.append((Op.UPDATE, _row(key, version)))
            model[key] = _row(key, version)
        for key in touched[8:]:
            changes.append((Op.DELETE, {"id": key}))
            del model[key]
        for key in range(next_key, next_key + 8):
            changes.append((Op.INSERT, _row(key, version)))
            model[key] = _row(key, version)
        next_key += 8
        _commit(table, changes)
        assert _reads(table) == model, f"batch {version}"
    live = _live_files(table)
    per_group: dict[object, int] = {}
    for f in live.data:
        group = tuple(f.partition[i] for i in range(len(f.partition)))
        per_group[group] = per_group.get(group, 0) + 1
    # Without merging every batch adds a file to each group it writes; the tiers keep about log2(16) + 1.
    assert max(per_group.values()) <= 5, per_group
    assert sum(per_group.values()) < batches * max(1, len(per_group)) // 2


def test_without_merging_every_batch_adds_a_file(catalog) -> None:
    """The counterpart of the bound above: the bound fails when nothing is merged."""
    table = _table(catalog, "plain")
    for version in range(1, 9):
        _commit(table, [(Op.INSERT, _row(k, version)) for k in range(version * 8, version * 8 + 8)], merge=False)
    assert len(_live_files(table).data) == 8


def test_a_merged_file_s_position_deletes_are_applied_and_go_with_it(catalog) -> None:
    table = _table(catalog, "deletes")
    _commit(table, [(Op.INSERT, _row(k, 0)) for k in range(100)], merge=False)
    _commit(table, [(Op.DELETE, {"id": k}) for k in range(0, 100, 3)], merge=False)  # a position delete file
    assert len(_live_files(table).deletes) == 1
    changes = [(Op.INSERT, _row(k, 1)) for k in range(100, 200)] + [(Op.UPDATE, _row(1, 1))]
    target = _commit(table, changes)
    assert target.merged == (0,)
    live = _live_files(table)
    assert not live.deletes and len(live.data) == 1  # the delete file went with the file it deleted from
    assert _reads(table) == {**{k: _row(k, 0) for k in range(100) if k % 3}, 1: _row(1, 1), **{k: _row(k, 1) for k in range(100, 200)}}


def test_the_routed_drop_rows_say_so_whatever_the_columns_are_named(catalog) -> None:
    """A write group tells drop rows from written rows by the pack's schema metadata, not by a column name."""
    table = _table(catalog, "names")
    _commit(table, [(Op.INSERT, _row(k, 0)) for k in range(3)])
    target = _target(table, 1)
    groups = upsert.route(_net([(Op.UPDATE, _row(1, 1))]), target)
    packs = [upsert._unipc(b) for b in groups.column("rows").to_pylist()]
    assert sorted(p.schema.metadata == upsert.DROPS for p in packs) == [False, True]
    assert isinstance(packs[0], pa.Table)


@pytest.mark.parametrize("spec", [UNPARTITIONED_PARTITION_SPEC, BUCKETED], ids=["unpartitioned", "bucketed"])
def test_every_group_a_net_change_routes_to_has_a_placement_and_big_files_spread(catalog, spec) -> None:
    """``placements`` names the groups as ``route`` does (else they would fall back to the hash), and
    puts the largest expected work first, each on the least loaded task."""
    table = _table(catalog, f"placed_{len(spec.fields)}", spec)
    for version in range(4):
        _commit(table, [(Op.INSERT, _row(k, version)) for k in range(version * 40, version * 40 + 40)], merge=False)
    changes = [(Op.UPDATE, _row(k, 9)) for k in range(0, 160, 7)] + [(Op.INSERT, _row(k, 9)) for k in range(500, 520)]
    targets = [_target(table, 43), _target(table, 43, merge=False)]
    placed = upsert.placements(targets, 4)
    routed = pa.concat_tables([upsert.route(_net(changes), t, request) for request, t in enumerate(targets)])
    keys = set(zip(routed.column("request").to_pylist(), routed.column("group").to_pylist()))
    assert keys <= set(placed), keys - set(placed)
    assert set(placed.values()) == set(range(4))  # every task gets work


def test_placements_put_the_largest_work_first_on_the_least_loaded_task() -> None:
    costs = {"f0": 100, "f1": 90, "f2": 20, "f3": 10, "p": 80}
    target = UpsertTarget(TableTarget("db.t", "not read by placements", {}), (), ("id",), costs=costs)
    placed = upsert.placements([target, None], 2)
    loads = [sum(c for g, c in costs.items() if placed[(0, g)] == p) for p in range(2)]
    # Largest first, each to the least loaded: f0 | f1, p to f1's (90 < 100), f2 and f3 to f0's.
    assert sorted(loads) == [130, 170] and placed[(0, "p")] == placed[(0, "f1")]
    assert placed[(0, "f0")] != placed[(0, "f1")]
