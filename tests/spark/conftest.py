"""Shared fixtures (Kafka, S3, topics, buckets) live in tests/conftest.py."""
