"""Thin entry points for spark-submit; each parses arguments and calls one tested function."""
