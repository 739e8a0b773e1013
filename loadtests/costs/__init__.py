"""Cost measurements whose figures a page cites: ``python -m loadtests.costs.<module>``."""
