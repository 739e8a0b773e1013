"""online-ctr: streaming online learning for click-through-rate prediction.

The packages, each importing only those listed before it (tests/test_layers.py holds this):

- ``online_ctr.learning``: the pure learning core (rules, features, the sequential learner,
  the snapshot format, the replay);
- ``online_ctr.config``: settings, a model's stored configuration, the join policy;
- ``online_ctr.metrics``, ``online_ctr.process``: the Prometheus metrics; what every process
  does first (logging, settings read once, one-line startup errors);
- ``online_ctr.store``: every Redis adapter (key names, Lua scripts, state, the commit log);
- ``online_ctr.wiring``, ``online_ctr.startup``, ``online_ctr.admin``: the Redis client from
  the settings, the startup steps, the model and group operations;
- ``service`` (the HTTP API) and ``workers`` (the learners), neither importing the other;
  ``online_ctr.client``, the Python client of the HTTP API (httpx only);
- ``online_ctr.cli``: the ``online-ctr`` command, on top of everything.
"""
