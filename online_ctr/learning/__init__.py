"""The pure learning core: the rules (one module each), hashing and features, the compiled
sequential learner, the snapshot file format, metrics over a stream, and the in-process replay.

numpy, numba and the standard library only: no Redis, HTTP, clock, logging or metrics, and no
import of any other part of ``online_ctr``, ``service`` or ``workers`` (tests/test_layers.py).
"""
