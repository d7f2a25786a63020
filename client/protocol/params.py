"""What every mechanism's params type shares: the limits, the ε check, and exact probability thresholds.

Each mechanism module (:mod:`ldptel.client.mechanisms`) defines one frozen params dataclass on
:class:`ParamsBase`. Every derived constant (flip probability, its integer threshold, the debias constant,
the effective ε) is a property computed from the same fields, so the client half (privatize) and the server
half (fold, estimate) of a mechanism can never disagree.

Probabilities are realised as integer thresholds ``T / 2**prob_bits`` (see :mod:`ldptel.client.protocol.rng`).
``T`` is always rounded in the direction that makes the mechanism *more* private, so
``effective_epsilon <= epsilon`` holds for every spec, and estimators debias with the effective
probabilities, not the nominal ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, ClassVar

from ldptel.client.protocol.validate import check_int, check_number

# ------------------------------------------------------------------------------------------------ limits
HASH_VERSIONS: tuple[int, ...] = (1,)
EPSILON_RANGE = (0.01, 30.0)
MAX_K = 1 << 16
M_RANGE = (8, 1 << 16)
MAX_CELLS = 1 << 26
MAX_DOMAIN = 1 << 16
MAX_LABEL_CHARS = 200
# Sketch bit probabilities use the fewest probability bits (at least 8) whose effective ε is within
# this fraction of the requested ε; single-draw mechanisms use 32 bits (the loss is then ~1e-9).
AUTO_PROB_BITS_LOSS = 0.01
AUTO_PROB_BITS_RANGE = (8, 24)
SINGLE_DRAW_PROB_BITS = 32
PROB_BITS_RANGE = (2, 32)
# Poisoning (issue 12): the ingest refuses a report no honest client produces, where the mechanism can tell
# (Mechanism.check_plausible). An honest report is refused with probability at most this (both tails together).
PLAUSIBILITY_FALSE_REJECTION = 1e-9


def check_epsilon(value: object) -> float:
    lo, hi = EPSILON_RANGE
    return check_number("epsilon", value, lo, hi)


def check_prob_bits(value: object, lo: int = PROB_BITS_RANGE[0]) -> int:
    return check_int("prob_bits", value, lo, PROB_BITS_RANGE[1])


# ----------------------------------------------------------------------------------- exact thresholds
def ceil_threshold(prob: float, bits: int) -> int:
    """Smallest T with T/2^bits >= prob (a flip probability rounded towards more noise)."""
    return max(1, math.ceil(prob * (1 << bits)))


def flip_epsilon(threshold: int, bits: int, scale: float = 1.0) -> float:
    """scale · ln((2^B − T)/T): the ε of flipping with probability T/2^B, computed from the integers."""
    return scale * (math.log((1 << bits) - threshold) - math.log(threshold))


@lru_cache(maxsize=4096)
def safe_flip_threshold(prob: float, bits: int, epsilon: float, scale: float) -> int:
    """Threshold for a flip probability whose ε (``scale``·ln((1−f)/f)) must not exceed ``epsilon``."""
    t = ceil_threshold(prob, bits)
    while t < (1 << (bits - 1)) and flip_epsilon(t, bits, scale) > epsilon:
        t += 1  # guard against the last ulp of the float computation of prob
    return t


# ------------------------------------------------------------------------------------------- the base
@dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class ParamsBase:
    """Fields and behaviour common to every mechanism's params: ε and the JSON form."""

    mechanism: ClassVar[str]
    epsilon: float

    def satisfies(self, budget: float) -> bool:
        """True when one report of this mechanism is ``budget``-LDP (effective ε ≤ budget)."""
        return self.effective_epsilon <= budget

    @property
    def effective_epsilon(self) -> float:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.mechanism}
        for field in fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out
