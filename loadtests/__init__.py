"""Benchmarks (``bench``), chaos and abuse suites (``chaos``), cost measurements (``costs``) and
the helpers they share (``common``); ``loadtests/README.md`` lists every module."""
