"""Stage 5: a run of an interval, committed table by table and published as one watermark W.

The run is ``run`` (``PipelineRun``, ``IntervalRun``), entered through ``apply.apply_interval``: it
takes the pipeline's lease (``spark.archive.lease``), decodes and folds the interval (``spark.decode``,
``spark.fold``), orders each table's DDL and rewrites into plans (``plan``), commits them in rounds
(``rounds``), each table's plan as one Iceberg transaction tagged ``wm_<W>`` (``table.TableCommitter``),
and once every table carries the tag writes W's published record (``published``) and the run's
report (``report``). W is the min over partitions of their resolved timestamps
(``spark.core.watermark``); ``quarantine`` keeps undecodable messages; ``isolation`` holds a failing
table at its last good W.
"""
