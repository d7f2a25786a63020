"""``oue-cms`` (ours): the count-mean sketch with optimized unary encoding (OUE) inside the row.

Same sketch, fold and estimator as Apple's cms (:mod:`ldptel.client.mechanisms.cms`, which holds the shared
unary-row code); only the row's bit probabilities differ: p = ½ at the hot bit, q = 1/(e^ε + 1) elsewhere,
about 2.4× fewer reports than cms for the same error at ε = 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ldptel.client.mechanisms.cms import Unary, UnaryParams
from ldptel.client.protocol.params import flip_epsilon, safe_flip_threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class OueCmsParams(UnaryParams):
    """Count-mean sketch with optimized unary encoding (OUE) inside the row.

    A report picks row j uniformly in [k]; in the length-m row the hot bit h_j(value) is kept (reported 1)
    with probability p = ½ and every cold bit is set with probability q = 1/(e^ε + 1) (rounded up to
    T/2^prob_bits). ε-LDP: for inputs hashing to a ≠ a′ the likelihood ratio of any output is
    [P(y_a|1)·P(y_a′|0)] / [P(y_a|0)·P(y_a′|1)] ≤ (½/q)·((1−q)/½) = (1−q)/q, so ε_eff = ln((2^B − T)/T);
    inputs hashing to the same a give identical distributions, and j is independent of the value.
    Per-report variance for a rare value q(1−q)/(½−q)² = 4e^ε/(e^ε−1)² (OUE), about 2.4× below cms at ε = 4.
    """

    mechanism: ClassVar[str] = "oue-cms"
    fair_hot_bit: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._validate_sketch()
        self._resolve_prob_bits(self._eps_for_bits)

    def _eps_for_bits(self, bits: int) -> float:
        return flip_epsilon(safe_flip_threshold(self.cold_probability, bits, self.epsilon, 1.0), bits)

    @property
    def cold_probability(self) -> float:
        """Nominal q = 1/(e^ε + 1)."""
        return 1.0 / (math.exp(self.epsilon) + 1.0)

    @property
    def cold_threshold(self) -> int:
        return safe_flip_threshold(self.cold_probability, self.bits, self.epsilon, 1.0)

    @property
    def noise_threshold(self) -> int:
        return self.cold_threshold

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return self.cold_threshold / (1 << self.bits)

    @property
    def effective_epsilon(self) -> float:
        return flip_epsilon(self.cold_threshold, self.bits)


class OueCms(Unary[OueCmsParams]):
    """The count-mean sketch with optimized unary encoding in the row."""

    name = "oue-cms"
    code = 5
    params_type = OueCmsParams


OUE_CMS = OueCms()
