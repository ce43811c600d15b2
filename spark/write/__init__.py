"""Stage 4: Iceberg writes as a data plane: executors rewrite and write files, the driver commits metadata.

Who runs what, for one table and one run:

- Driver, ``spark.tables.files.plan_rewrite``: reads the branch head's manifests (metadata only)
  and tests the touched keys against each data file's key bounds, NULL counts and bucket value,
  with no limit on the number of keys. Result: the head's snapshot id and the candidate
  ``DataFile``s.
- Executors, one task per candidate file. Merge-on-read (the default), ``rewrite.delete_keys``:
  read the file's key columns, write its one position delete file anew with the touched rows
  added, return ``FileRewrite(deletes_added, deletes_removed)``. Copy-on-write,
  ``rewrite.rewrite_file``: read the file, drop the rows whose key is touched (``key_match.key_mask``:
  a binary search in a key-sorted integer column, else Arrow ``is_in``; a NULL-safe semi-join for
  composite and whole-row keys), write the kept rows (plus, optionally,
  upserts routed to the file) as new files, return ``FileRewrite(removed, added)``.
  ``rewrite.write_rows``: new and updated rows, sorted by key, as new files; merge-on-read,
  ``rewrite.merge_files`` writes them together with the small files the driver chose to merge
  (``upsert.small_file_merges``: size tiers), whose touched keys it drops. Tasks get a
  ``target.TableTarget`` (the table's metadata without its history and the FileIO properties,
  plain strings) and Arrow tables; no catalog connection leaves the driver.
- Across the wire back to the driver: only ``DataFile`` metadata (path, size, counts, bounds,
  partition), a few hundred bytes per file, never rows or keys.
- Driver (stage 5), ``spark.tables.internals.stage_overwrite``/``commit_overwrite``: one snapshot
  per table that removes the rewritten files and adds the written ones, and swaps delete files
  (pyiceberg's overwrite producer, delete manifests added through its hooks), with the run's
  summary properties, in the same transaction as the run's schema and property changes.

How a commit is validated: the plan names the snapshot it read. Staging checks that the branch
head in the transaction is that snapshot, and the staged update carries Iceberg's
``AssertRefSnapshotId(branch, snapshot)`` requirement, which the catalog checks atomically at
commit. If another writer moved the branch in between, the commit fails with
``spark.tables.errors.CommitConflictError`` naming the expected and the found snapshot ids; it is
never rebased onto the new head (pyiceberg's retry would), because the removed files and the rows
kept from them were computed from the old one. Files written for a failed commit are orphans,
for orphan cleanup to delete.

All pyiceberg private API lives in ``spark.tables.internals`` (written for pyiceberg 0.12.0, pinned by tests).
"""
