"""The ``online-ctr`` command line (:mod:`online_ctr.cli.main`): one module per sub-command,
plus the local service's pieces (the embedded Redis, the data directory). The top of the
layers: it may start the API (``service``) and the learners (``workers``); nothing imports it."""
