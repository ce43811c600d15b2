"""tidelake's batch side: the raw archive, the apply job and the Iceberg commit.

Where data enters: ``offsets.plan_offsets`` and ``land.land_interval`` (Kafka -> segments).
Everything touches storage through ``storage.Storage`` and paths through ``layout``.
"""
