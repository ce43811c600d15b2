"""Maintenance: tag retention, snapshot expiry, compaction, orphan cleanup, archive retention."""
