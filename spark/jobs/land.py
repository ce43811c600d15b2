"""spark-submit entry point for stage 1: snapshot offsets and land raw segments.

    spark-submit spark/jobs/land.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Prints one summary block (manifest, messages, segments, partitions, bytes, seconds, any
retention gaps) before Spark stops; exits 0 when the interval is in the archive (landed
now or already), 2 on a configuration error, 1 on any other failure.
"""

from __future__ import annotations

import sys
from typing import Any

if __name__ == "__main__":  # run by spark-submit: this file is the installation's, the library may be the --py-files archive
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).with_name("same_build.py")))["require_same_build"](__file__)

from spark.core.text import human_bytes, utc_text
from spark.jobs import emit, interval_job
from spark.archive.land import LandResult, land_interval


def land_summary(result: LandResult) -> list[str]:
    """The task log's account of a land run: the manifest's counts, and the report's time and gaps."""
    m = result.manifest
    segments = [s for p in m.partitions for s in p.segments]
    size = human_bytes(sum(s.bytes for s in segments))
    head = (f"{m.path}  {m.messages} messages in {len(segments)} segments over {len(m.partitions)} partitions, {size}")
    if result.reused:
        return [f"already landed: {head} (manifest of {utc_text(m.created_at)}, kept)"]
    report: dict[str, Any] = result.report
    where = " in the driver without starting Spark" if report.get("ran_in") == "driver" else ""
    lines = [f"landed: {head} in {report.get('seconds', 0):.2f} s{where}"]
    for gap in report.get("gaps", []):
        lines.append(f"  gap: {gap['topic']}/{gap['partition']} offsets {gap['start']}..{gap['end']} "
                     "were deleted by retention before they were archived")
    return lines


def run(config, start, end, runner, args) -> int:  # noqa: ANN001 - see interval_job
    emit(land_summary(land_interval(config, start, end, runner=runner)))
    return 0


def main(argv: list[str] | None = None) -> int:
    return interval_job("land", run, argv)


if __name__ == "__main__":
    sys.exit(main())
