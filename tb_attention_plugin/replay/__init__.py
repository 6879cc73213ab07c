"""What-if replay (issue #20): every distinct attention call of a trace, rebuilt from its recorded
shapes, strides, dtypes and flags by a script that times it under each backend on the user's GPU.

* :mod:`.calls` — the distinct calls of a trace (one per signature), from the engine's tagging;
* :mod:`.emit` — the self-contained, torch-only script (:mod:`.runner` is its body);
* :mod:`.results` — reading a ``*.replay.json`` beside a trace: per call and backend, the measured
  times, and :func:`.results.replay_times` for the advice rules;
* :mod:`.block` — the report's ``replay`` block; :mod:`.findings` — the measured-backend finding.
"""
