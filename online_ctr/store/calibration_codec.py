"""A model's calibration in its meta hash: the fit ``/predict`` applies, and the histogram the
learner refits it from (:mod:`online_ctr.learning.calibration`).

Two fields of the meta hash, written by ``finalize.lua`` with each commit (so the fit always
matches the step it was fitted at): ``calibration_fit``, the text ``"<log gamma> <kappa>"``
(``repr`` of each float, so it reads back exactly), which ``/predict`` reads in the same
command as the step; and ``calibration_histogram``, the histogram's float64 values as bytes
(16.8 kB), which only the learner reads, when it takes over.

>>> fit = PowerFit(-0.25, 1.125)
>>> decode_fit(encode_fit(fit)) == fit, decode_fit(None)
(True, PowerFit(log_gamma=0.0, kappa=1.0))
>>> histogram = Histogram.empty().add(np.array([0.5]), np.array([1.0]))
>>> bool((decode_histogram(encode_histogram(histogram)).sums == histogram.sums).all())
True
"""

from __future__ import annotations

import numpy as np

from online_ctr.learning.calibration import BINS, Histogram, PowerFit

#: The meta hash's fields.
FIT_FIELD = "calibration_fit"
HISTOGRAM_FIELD = "calibration_histogram"


def encode_fit(fit: PowerFit) -> str:
    return f"{fit.log_gamma!r} {fit.kappa!r}"


def decode_fit(text: bytes | str | None) -> PowerFit:
    """The stored fit; the identity before the first commit."""
    if not text:
        return PowerFit()
    raw = text.decode() if isinstance(text, bytes) else text
    log_gamma, kappa = (float(part) for part in raw.split())
    return PowerFit(log_gamma, kappa)


def encode_histogram(histogram: Histogram) -> bytes:
    return histogram.sums.astype("<f8").tobytes()


def decode_histogram(blob: bytes | None) -> Histogram:
    """The stored histogram; empty before the first commit."""
    if not blob:
        return Histogram.empty()
    return Histogram(np.frombuffer(blob, "<f8").reshape(3, BINS).copy())
