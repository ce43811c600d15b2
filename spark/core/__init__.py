"""The ground floor: the words every stage shares, importing no stage.

- ``watermark``: watermarks and TiDB TSOs -- the pipeline W (min over partitions), tags
  ``wm_<W>``, derived clocks, W as a time;
- ``keys``: a change's key -- canonical key bytes, the key hash slices cut by, a change's effects
  per key and its commit order;
- ``key_match``: which rows carry which keys (a NULL-safe join of key columns in Arrow);
- ``text``: durations and sizes as text.

Stages import downward only: archive -> decode -> fold -> tables -> write -> commit (then publish),
then maintain, repair, query, jobs, cli (docs/architecture.md, "Floors").
"""
