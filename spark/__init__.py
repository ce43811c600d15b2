"""tidelake's batch side, one folder per stage of a run (README, "Architecture").

    archive/   Kafka offsets -> raw segments and manifests in object storage (where data enters)
    decode/    raw segments -> the change log (Parquet) and side outputs, once per decoder version
    fold/      the change log of (W_prev, W] -> one net change per key (the one fold rule)
    write/     net changes -> Iceberg data and delete files on the executors, metadata staged on the driver
    commit/    the run: plan, per-table commit, tag ``wm_<W>``, publish W; lease, quarantine, isolation
    tables/    the Iceberg catalog, MySQL -> Iceberg schema mapping, DDL, partitions
    maintain/  retention, snapshot expiry, compaction, orphans, archive retention
    query/     reading every table at one published W
    repair/    re-deriving published history from the archive
    cli/, jobs/, demo/   the ``tidelake`` command, spark-submit entry points, the first-run demo
    runtime/   Spark sessions, the embedded services, credentials, where row work runs

``config`` (the pipeline file) is the one module every stage reads.
"""
