"""What the benchmarks, chaos suites and cost measurements share: processes, loads, statistics,
reports and figures."""
