"""Metric specs: one frozen, validated params type per mechanism, and the versioned metric that wraps it.

Every derived constant (flip probability, its integer threshold, the debias constant, the effective ε) is a
property computed from the same fields, so the client half (privatize) and the server half (fold, estimate)
of a mechanism can never disagree. Specs round-trip through JSON exactly (:meth:`MetricSpec.to_json`,
:func:`params_from_dict`): the registry, the wire and the on-device cache all use that form.

Probabilities are realised as integer thresholds ``T / 2**prob_bits`` (see :mod:`ldptel.client.protocol.rng`).
``T`` is always rounded in the direction that makes the mechanism *more* private, so
``effective_epsilon <= epsilon`` holds for every spec, and estimators debias with the effective
probabilities, not the nominal ones.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

from ldptel.client.errors import InvalidParameterError

MechanismName = Literal["rr", "grr", "cms", "hcms", "oue-cms"]
MECHANISMS: tuple[str, ...] = ("rr", "grr", "cms", "hcms", "oue-cms")
HASH_VERSIONS: tuple[int, ...] = (1,)
EPSILON_RANGE = (0.01, 30.0)
MAX_K = 1 << 16
M_RANGE = (8, 1 << 16)
MAX_CELLS = 1 << 26
MAX_DOMAIN = 1 << 16
# Sketch bit probabilities use the fewest probability bits (at least 8) whose effective ε is within
# this fraction of the requested ε; single-draw mechanisms use 32 bits (the loss is then ~1e-9).
AUTO_PROB_BITS_LOSS = 0.01
AUTO_PROB_BITS_RANGE = (8, 24)
SINGLE_DRAW_PROB_BITS = 32
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # use fullmatch: "$" would also accept a trailing "\n"


# --------------------------------------------------------------------------------------------- validation
def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameterError(name, f"an integer in [{lo}, {hi}]", value)
    if not lo <= value <= hi:
        raise InvalidParameterError(name, f"an integer in [{lo}, {hi}]", value)
    return value


def _check_epsilon(value: object) -> float:
    lo, hi = EPSILON_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError("epsilon", f"a number in [{lo}, {hi}]", value)
    eps = float(value)
    if not (math.isfinite(eps) and lo <= eps <= hi):
        raise InvalidParameterError("epsilon", f"a number in [{lo}, {hi}]", value)
    return eps


def _ceil_threshold(prob: float, bits: int) -> int:
    """Smallest T with T/2^bits >= prob (a flip probability rounded towards more noise)."""
    return max(1, math.ceil(prob * (1 << bits)))


def _flip_epsilon(threshold: int, bits: int, scale: float = 1.0) -> float:
    """scale · ln((2^B − T)/T): the ε of flipping with probability T/2^B, computed from the integers."""
    return scale * (math.log((1 << bits) - threshold) - math.log(threshold))


@lru_cache(maxsize=4096)
def _safe_flip_threshold(prob: float, bits: int, epsilon: float, scale: float) -> int:
    """Threshold for a flip probability whose ε (``scale``·ln((1−f)/f)) must not exceed ``epsilon``."""
    t = _ceil_threshold(prob, bits)
    while t < (1 << (bits - 1)) and _flip_epsilon(t, bits, scale) > epsilon:
        t += 1  # guard against the last ulp of the float computation of prob
    return t


# ------------------------------------------------------------------------------------------- params base
@dataclass(frozen=True, slots=True, kw_only=True)
class _ParamsBase:
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
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out


def _resolve_prob_bits(value: int | None, default: int) -> int:
    if value is None:
        return default
    return _check_int("prob_bits", value, 1, 32)


# -------------------------------------------------------------------------------------------------- rr
@dataclass(frozen=True, slots=True, kw_only=True)
class RrParams(_ParamsBase):
    """Binary randomized response (Warner 1965).

    Report the true bit with probability ½ + γ and its negation with probability ½ − γ, where
    γ = ½·tanh(ε/2), so ε = ln((½+γ)/(½−γ)). The flip probability ½ − γ = 1/(e^ε + 1) is rounded *up* to
    T/2^prob_bits. Build from γ with :meth:`from_gamma`.
    """

    mechanism: ClassVar[str] = "rr"
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "prob_bits", _check_int("prob_bits", self.prob_bits, 2, 32))
        if self.flip_threshold >= 1 << (self.prob_bits - 1):
            raise InvalidParameterError("prob_bits", "large enough for epsilon to survive rounding", self.prob_bits)

    @classmethod
    def from_gamma(cls, gamma: float, *, prob_bits: int = SINGLE_DRAW_PROB_BITS) -> RrParams:
        """Params for a given γ ∈ (0, ½): ε = ln((½+γ)/(½−γ)) = 2·artanh(2γ)."""
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma < 0.5:
            raise InvalidParameterError("gamma", "a number in (0, 0.5)", gamma)
        return cls(epsilon=math.log((0.5 + gamma) / (0.5 - gamma)), prob_bits=prob_bits)

    @property
    def gamma(self) -> float:
        """Nominal γ = ½·tanh(ε/2)."""
        return 0.5 * math.tanh(self.epsilon / 2)

    @property
    def flip_probability(self) -> float:
        """Nominal P(flip) = ½ − γ = 1/(e^ε + 1)."""
        return 1.0 / (math.exp(self.epsilon) + 1.0)

    @property
    def flip_threshold(self) -> int:
        return _safe_flip_threshold(self.flip_probability, self.prob_bits, self.epsilon, 1.0)

    @property
    def effective_flip(self) -> float:
        return self.flip_threshold / (1 << self.prob_bits)

    @property
    def effective_gamma(self) -> float:
        return 0.5 - self.effective_flip

    @property
    def effective_epsilon(self) -> float:
        return _flip_epsilon(self.flip_threshold, self.prob_bits)


# ------------------------------------------------------------------------------------------------- grr
def _grr_epsilon(t: int, d: int, bits: int) -> float:
    return math.log(t) + math.log(d - 1) - math.log((1 << bits) - t)


@lru_cache(maxsize=1024)
def _grr_keep_threshold(epsilon: float, d: int, bits: int) -> int:
    """Largest T with T/2^bits <= e^ε/(e^ε + d − 1) whose ε (computed from T) does not exceed ε."""
    t = math.floor(math.exp(epsilon) / (math.exp(epsilon) + d - 1) * (1 << bits))
    while t > 1 and _grr_epsilon(t, d, bits) > epsilon:
        t -= 1
    return t


@dataclass(frozen=True, slots=True, kw_only=True)
class GrrParams(_ParamsBase):
    """k-ary (generalized) randomized response over a declared finite domain of d labels.

    Keep the true label with probability p = e^ε/(e^ε + d − 1), else report one of the other d − 1 labels
    uniformly, each with probability q = (1 − p)/(d − 1). p is rounded *down* to T/2^prob_bits, so
    ε_eff = ln(p(d − 1)/(1 − p)) ≤ ε, and p + (d − 1)q = 1 exactly.
    """

    mechanism: ClassVar[str] = "grr"
    domain: tuple[str, ...]
    prob_bits: int = SINGLE_DRAW_PROB_BITS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "prob_bits", _check_int("prob_bits", self.prob_bits, 8, 32))
        domain = self.domain
        if isinstance(domain, (str, bytes)) or not isinstance(domain, (tuple, list)):
            raise InvalidParameterError("domain", f"a list of 2 to {MAX_DOMAIN} distinct labels", domain)
        domain = tuple(domain)
        if not 2 <= len(domain) <= MAX_DOMAIN:
            raise InvalidParameterError("domain", f"a list of 2 to {MAX_DOMAIN} distinct labels", f"{len(domain)} labels")
        for label in domain:
            if not isinstance(label, str) or not 1 <= len(label) <= 200:
                raise InvalidParameterError("domain", "labels that are strings of 1 to 200 characters", label)
        if len(set(domain)) != len(domain):
            raise InvalidParameterError("domain", "distinct labels", "a list with duplicates")
        object.__setattr__(self, "domain", domain)
        if self.keep_threshold * len(domain) <= 1 << self.prob_bits:
            raise InvalidParameterError("epsilon", "large enough that p stays above 1/d after rounding", self.epsilon)

    @property
    def d(self) -> int:
        return len(self.domain)

    @property
    def keep_probability(self) -> float:
        """Nominal p = e^ε/(e^ε + d − 1)."""
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.d - 1)

    @property
    def keep_threshold(self) -> int:
        return _grr_keep_threshold(self.epsilon, self.d, self.prob_bits)

    def _eps_of(self, t: int) -> float:
        return _grr_epsilon(t, self.d, self.prob_bits)

    @property
    def p(self) -> float:
        """Effective P(report = true label)."""
        return self.keep_threshold / (1 << self.prob_bits)

    @property
    def q(self) -> float:
        """Effective P(report = a given other label)."""
        return (1.0 - self.p) / (self.d - 1)

    @property
    def effective_epsilon(self) -> float:
        return self._eps_of(self.keep_threshold)


# --------------------------------------------------------------------------------------------- sketches
@dataclass(frozen=True, slots=True, kw_only=True)
class _SketchParams(_ParamsBase):
    k: int
    m: int
    hash_seed: int = 0
    hash_version: int = 1
    prob_bits: int | None = None  # None: chosen automatically and then stored explicitly

    def _validate_sketch(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        _check_int("k", self.k, 1, MAX_K)
        lo, hi = M_RANGE
        _check_int("m", self.m, lo, hi)
        if self.m & (self.m - 1):
            raise InvalidParameterError("m", f"a power of two in [{lo}, {hi}]", self.m)
        if self.k * self.m > MAX_CELLS:
            raise InvalidParameterError("k*m", f"at most {MAX_CELLS} cells", self.k * self.m)
        _check_int("hash_seed", self.hash_seed, 0, (1 << 32) - 1)
        if self.hash_version not in HASH_VERSIONS:
            raise InvalidParameterError("hash_version", f"one of {list(HASH_VERSIONS)}", self.hash_version)

    def _auto_bits(self, eps_at: Any) -> int:
        lo, hi = AUTO_PROB_BITS_RANGE
        for bits in range(lo, hi + 1):
            if eps_at(bits) >= (1.0 - AUTO_PROB_BITS_LOSS) * self.epsilon:
                return bits
        return hi

    @property
    def log2_m(self) -> int:
        return self.m.bit_length() - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class _UnaryRowParams(_SketchParams):
    """Shared by cms and oue-cms: a k×m sketch whose row holds m privatized unary bits."""

    @property
    def p(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def q(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class CmsParams(_UnaryRowParams):
    """Apple's private count-mean sketch (CMS).

    A report picks row j uniformly in [k], builds the one-hot vector of length m at h_j(value) and flips
    every bit with probability 1/(e^(ε/2) + 1) (rounded up to T/2^prob_bits). Two inputs differ in at most
    two coordinates, each ε/2-private, so a report is ε-LDP: ε_eff = 2·ln((2^B − T)/T).
    Debias constant c_ε = (e^(ε/2)+1)/(e^(ε/2)−1) = 1/(p − q) with p = 1 − f, q = f.
    """

    mechanism: ClassVar[str] = "cms"

    def __post_init__(self) -> None:
        self._validate_sketch()
        if self.prob_bits is None:
            object.__setattr__(self, "prob_bits", self._auto_bits(self._eps_for_bits))
        else:
            _check_int("prob_bits", self.prob_bits, 2, 32)

    def _eps_for_bits(self, bits: int) -> float:
        return _flip_epsilon(_safe_flip_threshold(self.flip_probability, bits, self.epsilon, 2.0), bits, 2.0)

    @property
    def flip_probability(self) -> float:
        """Nominal P(flip) = 1/(e^(ε/2) + 1)."""
        return 1.0 / (math.exp(self.epsilon / 2) + 1.0)

    @property
    def c_epsilon(self) -> float:
        """Nominal debias constant (e^(ε/2)+1)/(e^(ε/2)−1)."""
        e = math.exp(self.epsilon / 2)
        return (e + 1) / (e - 1)

    @property
    def flip_threshold(self) -> int:
        assert self.prob_bits is not None
        return _safe_flip_threshold(self.flip_probability, self.prob_bits, self.epsilon, 2.0)

    @property
    def effective_flip(self) -> float:
        assert self.prob_bits is not None
        return self.flip_threshold / (1 << self.prob_bits)

    @property
    def p(self) -> float:
        """Effective P(bit = 1 | true bit 1) = 1 − f."""
        return 1.0 - self.effective_flip

    @property
    def q(self) -> float:
        """Effective P(bit = 1 | true bit 0) = f."""
        return self.effective_flip

    @property
    def effective_epsilon(self) -> float:
        assert self.prob_bits is not None
        return _flip_epsilon(self.flip_threshold, self.prob_bits, 2.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class OueCmsParams(_UnaryRowParams):
    """Count-mean sketch with optimized unary encoding (OUE) inside the row.

    A report picks row j uniformly in [k]; in the length-m row the hot bit h_j(value) is kept (reported 1)
    with probability p = ½ and every cold bit is set with probability q = 1/(e^ε + 1) (rounded up to
    T/2^prob_bits). ε-LDP: for inputs hashing to a ≠ a′ the likelihood ratio of any output is
    [P(y_a|1)·P(y_a′|0)] / [P(y_a|0)·P(y_a′|1)] ≤ (½/q)·((1−q)/½) = (1−q)/q, so ε_eff = ln((2^B − T)/T);
    inputs hashing to the same a give identical distributions, and j is independent of the value.
    Per-report variance for a rare value q(1−q)/(½−q)² = 4e^ε/(e^ε−1)² (OUE), about 2.4× below cms at ε = 4.
    """

    mechanism: ClassVar[str] = "oue-cms"

    def __post_init__(self) -> None:
        self._validate_sketch()
        if self.prob_bits is None:
            object.__setattr__(self, "prob_bits", self._auto_bits(self._eps_for_bits))
        else:
            _check_int("prob_bits", self.prob_bits, 2, 32)

    def _eps_for_bits(self, bits: int) -> float:
        return _flip_epsilon(_safe_flip_threshold(self.cold_probability, bits, self.epsilon, 1.0), bits)

    @property
    def cold_probability(self) -> float:
        """Nominal q = 1/(e^ε + 1)."""
        return 1.0 / (math.exp(self.epsilon) + 1.0)

    @property
    def cold_threshold(self) -> int:
        assert self.prob_bits is not None
        return _safe_flip_threshold(self.cold_probability, self.prob_bits, self.epsilon, 1.0)

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        assert self.prob_bits is not None
        return self.cold_threshold / (1 << self.prob_bits)

    @property
    def effective_epsilon(self) -> float:
        assert self.prob_bits is not None
        return _flip_epsilon(self.cold_threshold, self.prob_bits)


@dataclass(frozen=True, slots=True, kw_only=True)
class HcmsParams(_SketchParams):
    """Hadamard count-mean sketch: one privatized bit per report.

    A report picks j uniformly in [k] and l uniformly in [m], takes w = H_m[l, h_j(value)] ∈ {±1} and
    flips it with probability 1/(e^ε + 1): ε, not ε/2, because one coordinate is released. Debias with
    c_ε^H = (e^ε+1)/(e^ε−1) = 1/(1 − 2f_eff) — never the cms constant (ldp-math.md §1.5 shows two
    implementations that shipped that bug).
    """

    mechanism: ClassVar[str] = "hcms"

    def __post_init__(self) -> None:
        self._validate_sketch()
        if self.prob_bits is None:
            object.__setattr__(self, "prob_bits", SINGLE_DRAW_PROB_BITS)
        else:
            _check_int("prob_bits", self.prob_bits, 2, 32)

    @property
    def flip_probability(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + 1.0)

    @property
    def c_epsilon(self) -> float:
        """Nominal c_ε^H = (e^ε+1)/(e^ε−1)."""
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    @property
    def flip_threshold(self) -> int:
        assert self.prob_bits is not None
        return _safe_flip_threshold(self.flip_probability, self.prob_bits, self.epsilon, 1.0)

    @property
    def effective_flip(self) -> float:
        assert self.prob_bits is not None
        return self.flip_threshold / (1 << self.prob_bits)

    @property
    def effective_c(self) -> float:
        """The constant the estimator uses: 1/(1 − 2·f_eff)."""
        return 1.0 / (1.0 - 2.0 * self.effective_flip)

    @property
    def effective_epsilon(self) -> float:
        assert self.prob_bits is not None
        return _flip_epsilon(self.flip_threshold, self.prob_bits)


Params = Union[RrParams, GrrParams, CmsParams, OueCmsParams, HcmsParams]
SketchParams = Union[CmsParams, OueCmsParams, HcmsParams]
PARAMS_TYPES: dict[str, type] = {
    "rr": RrParams,
    "grr": GrrParams,
    "cms": CmsParams,
    "hcms": HcmsParams,
    "oue-cms": OueCmsParams,
}


def params_from_dict(data: object) -> Params:
    """Build and validate params from their JSON form (``{"mechanism": "cms", "epsilon": 4, ...}``)."""
    if not isinstance(data, dict):
        raise InvalidParameterError("params", "a JSON object", type(data).__name__)
    mech = data.get("mechanism")
    if not isinstance(mech, str) or mech not in PARAMS_TYPES:
        raise InvalidParameterError("mechanism", f"one of {list(MECHANISMS)}", mech)
    cls = PARAMS_TYPES[mech]
    allowed = set(cls.__dataclass_fields__)
    kwargs = {key: value for key, value in data.items() if key != "mechanism"}
    for key in kwargs:
        if key not in allowed:
            raise InvalidParameterError(key, f"not set: {mech} takes {sorted(allowed)}", kwargs[key])
    if mech == "grr" and isinstance(kwargs.get("domain"), list):
        kwargs["domain"] = tuple(kwargs["domain"])
    try:
        return cls(**kwargs)  # type: ignore[no-any-return]
    except TypeError as exc:  # a required field is missing
        raise InvalidParameterError("params", f"complete {mech} params ({exc})", sorted(kwargs)) from None


# -------------------------------------------------------------------------------------------- MetricSpec
@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """A named, versioned metric: mechanism params plus the device reporting policy.

    ``reports_per_day`` is how many reports one device may send per UTC day; its daily privacy spend is
    ``effective_epsilon × reports_per_day`` (:attr:`daily_epsilon`). Changing any parameter is a new
    ``version``; sketches are kept per version and never mixed.
    """

    name: str
    params: Params
    version: int = 1
    reports_per_day: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise InvalidParameterError(
                "name", "1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit", self.name
            )
        if not isinstance(self.params, tuple(PARAMS_TYPES.values())):
            raise InvalidParameterError("params", "RrParams, GrrParams, CmsParams, HcmsParams or OueCmsParams", self.params)
        _check_int("version", self.version, 1, (1 << 31) - 1)
        _check_int("reports_per_day", self.reports_per_day, 1, 10_000)
        if not isinstance(self.description, str) or len(self.description) > 1000:
            raise InvalidParameterError("description", "a string of at most 1000 characters", self.description)

    @property
    def mechanism(self) -> str:
        return self.params.mechanism

    @property
    def effective_epsilon(self) -> float:
        return self.params.effective_epsilon

    @property
    def daily_epsilon(self) -> float:
        """Privacy spent by a device that uses its whole daily policy."""
        return self.params.effective_epsilon * self.reports_per_day

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "params": self.params.to_dict(),
            "reports_per_day": self.reports_per_day,
            "description": self.description,
            "effective_epsilon": self.effective_epsilon,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: object) -> MetricSpec:
        if not isinstance(data, dict):
            raise InvalidParameterError("metric", "a JSON object", type(data).__name__)
        allowed = {"name", "version", "params", "reports_per_day", "description", "effective_epsilon"}
        for key in data:
            if key not in allowed:
                raise InvalidParameterError(key, f"not set: a metric takes {sorted(allowed)}", data[key])
        if "name" not in data or "params" not in data:
            raise InvalidParameterError("metric", "an object with at least 'name' and 'params'", sorted(data))
        return cls(
            name=data["name"],
            params=params_from_dict(data["params"]),
            version=data.get("version", 1),
            reports_per_day=data.get("reports_per_day", 1),
            description=data.get("description", ""),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MetricSpec:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidParameterError("metric", "valid JSON", str(exc)) from None
        return cls.from_dict(data)

    def with_version(self, version: int) -> MetricSpec:
        return MetricSpec(
            name=self.name,
            params=self.params,
            version=version,
            reports_per_day=self.reports_per_day,
            description=self.description,
        )

