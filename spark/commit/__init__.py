"""Stage 4: a run of an interval, committed table by table and published as one watermark W.

``apply.apply_interval`` drives a run: it takes the pipeline's lease (``lease``), decodes and folds
the interval (``spark.decode``, ``spark.fold``), orders each table's DDL and rewrites into plans
(``plan``), commits each table's plan as one Iceberg transaction and tags it ``wm_<W>``
(``table.TableCommitter``), and once every table carries the tag writes W's published record
(``published``). ``watermark`` merges the partitions' resolved timestamps into W; ``quarantine``
keeps undecodable messages; ``isolation`` holds a failing table at its last good W.
"""
