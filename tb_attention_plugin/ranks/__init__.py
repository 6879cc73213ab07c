"""Jobs of many ranks: one compact summary per trace, the job's spread and its stragglers, and the
per-file work spread over a Dask cluster.

* :mod:`.summary`: a report -> the rank's summary (kept beside the report in the on-disk cache,
  :mod:`.store`), a few KB however big the trace;
* :mod:`.job`: summaries -> rows in rank order, the spread, the stragglers (a robust rule);
* :mod:`.distributed`: per-file work in-process, on a ``LocalCluster`` or on an existing Dask
  scheduler; only summaries travel back;
* :mod:`.render`: the ``tb-attention ranks`` table and CSV.
"""
