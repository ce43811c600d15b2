"""Stage 3 of a run: the change-log rows of (W_prev, W] folded into one net change per key.

``select`` cuts a run's rows out of the change log (offset window per partition, commitTs
window, the DDL segment of each row); ``net_change.greatest_per_key`` is the fold rule; a
plane (``spark.plane``) runs both on Spark executors or in process.
"""
