"""Shared fixtures (Kafka, S3, topics, buckets) live in tests/conftest.py; the Spark runner of a
test module here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def spark_runner(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A ``SparkRunner`` on a local[2] context (its UI off), one for the test module, stopped after it."""
    from spark.runtime.runners import SparkRunner
    from spark.runtime.session import build_context

    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    context = build_context(f"tidelake-{name}", "local[2]", **{"spark.ui.enabled": "false",
                                                                "spark.ui.showConsoleProgress": "false"})
    yield SparkRunner(context)
    context.stop()
