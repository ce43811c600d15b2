"""The reference model: MySQL/TiDB semantics applied event by event, kept apart from the code under test."""
