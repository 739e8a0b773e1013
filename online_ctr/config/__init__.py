"""Configuration read once per process: the settings (``OCTR_*``), the join policy they
describe and the TLS context of a ``rediss://`` Redis. Built on the learning core (a rule's
hyper-parameters); no I/O but reading the files settings name (a password, certificates)."""
