"""Where a run executes: Spark sessions (``session``), the embedded Kafka/S3 of a first run (``embedded``),
object-store credentials (``credentials``), the Spark or in-process plane for row work (``plane``) and
what every task body shares (``tasks``)."""
