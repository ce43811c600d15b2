"""Stage 3 of a run: the change-log rows of (W_prev, W] folded into one net change per key.

``select`` cuts a run's rows out of the change log (offset window per partition, commitTs
window, the DDL segment of each row); ``slices`` reads one key-hash slice of the change log and
folds it with ``net_change.greatest``, the fold rule; a plane (``spark.write.plane``) runs a
task per slice on Spark executors, or one slice holding everything in process.
"""
