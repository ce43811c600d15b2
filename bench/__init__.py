"""Benchmarks: figures printed as ratios to a baseline measured in the same run."""
