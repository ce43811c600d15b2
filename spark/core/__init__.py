"""The ground floor: the words every stage shares, importing no stage.

- ``watermark``: watermarks and TiDB TSOs -- the pipeline W (min over partitions), tags
  ``wm_<W>``, derived clocks, W as a time;
- ``keys``: a change's key -- canonical key bytes, the key hash slices cut by, a change's effects
  per key and its commit order.

Stages import downward only: archive -> decode -> fold -> write / commit -> publish, then
maintain, repair, query, cli (docs/architecture.md).
"""
