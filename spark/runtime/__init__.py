"""Where a run executes: Spark sessions (``session``), the embedded Kafka/S3 of a first run (``embedded``),
object-store credentials (``credentials``), where a stage's tasks run (``runners``: in process, on
Spark, or Spark started when first needed) and what every task body shares (``tasks``); the plane
for row work is ``spark.write.plane``."""
