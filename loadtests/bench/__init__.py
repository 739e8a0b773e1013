"""Benchmarks behind ``make bench*``: each measurement beside its baseline, written to a report."""
