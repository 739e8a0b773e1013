"""Benchmarks and load tests, each run as ``python -m loadtests.<module>``."""
