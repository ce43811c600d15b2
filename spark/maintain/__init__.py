"""Table maintenance: tag retention, snapshot expiry, compaction, orphan cleanup, archive retention.

``spark.maintain.run.maintain`` runs the steps in order under the pipeline's lease.
"""
