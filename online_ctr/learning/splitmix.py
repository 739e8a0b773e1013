"""SplitMix64's output function (Steele et al. 2014), elementwise over numpy arrays: the one
64-bit mixer behind every hash the learner draws from (the compact encoding's rounding, the
negative sampling's choice, the Poisson admission's draw), each salted its own way.

>>> int(mix(np.array([0], np.uint64))[0])
16294208416658607535
>>> float(uniform(np.array([2**63], np.uint64))[0])
0.5
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A bijection of 64-bit words that scatters every input bit over the output (uint64
    arithmetic wraps, as it should)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    result: NDArray[np.uint64] = x ^ (x >> np.uint64(31))
    return result


def uniform(h: NDArray[np.uint64]) -> NDArray[np.float64]:
    """Well-mixed hashes as numbers in [0, 1): their top 53 bits, exactly."""
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
