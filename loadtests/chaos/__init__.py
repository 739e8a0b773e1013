"""Chaos and abuse suites: kills, stalls, attacks and fuzzing of the real service."""
