"""What the tests and the load tests share: a local Redis Cluster (``local_cluster``), Redis
over TLS with certificates made for the run (``tls``), free loopback ports (``ports``) and where
the repository and the shared data are (``paths``).

It imports neither ``tests`` nor ``loadtests``, and ``loadtests`` imports nothing from
``tests`` (``tests/test_layers.py``): both trees stand on this one."""
