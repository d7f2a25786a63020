"""Metric specs: a mechanism's params plus the device reporting policy, named and versioned.

Each mechanism's params type lives in its module (:mod:`ldptel.client.mechanisms`); this module wraps it in
a :class:`MetricSpec`. Specs round-trip through JSON exactly (:meth:`MetricSpec.to_json`,
:func:`params_from_dict`): the registry, the wire and the on-device cache all use that form.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.capabilities import on_device
from ldptel.client.mechanisms.longitudinal import report_charge
from ldptel.client.mechanisms.registry import get_mechanism, mechanism_names, mechanism_of
from ldptel.client.protocol.breakdown import ProfileSchema, check_dimensions
from ldptel.client.protocol.params import ParamsBase
from ldptel.client.protocol.validate import check_day, check_int, check_text

Params = ParamsBase  # any registered mechanism's params (each mechanism module defines its own type)
MECHANISMS: tuple[str, ...] = mechanism_names()
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # use fullmatch: "$" would also accept a trailing "\n"
NAME_RULE = "1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
MAX_REPORTS_PER_DAY = 10_000
MAX_DESCRIPTION_CHARS = 1000
MAX_OWNER_CHARS = 200
MAX_NOTES_CHARS = 4000
# Fields that describe a metric without changing how a device privatizes or how often: editing only these
# updates the current version in place (a new version would restart the devices' permanent randomization).
METADATA_FIELDS = ("description", "owner", "expires", "notes")


def params_from_dict(data: object) -> Params:
    """Build and validate params from their JSON form (``{"mechanism": <name>, "epsilon": 4, ...}``)."""
    if not isinstance(data, dict):
        raise InvalidParameterError("params", "a JSON object", type(data).__name__)
    mech = data.get("mechanism")
    if not isinstance(mech, str) or mech not in mechanism_names():  # asked each time: a plugin may register one
        raise InvalidParameterError("mechanism", f"one of {list(mechanism_names())}", mech)
    cls = get_mechanism(mech).params_type
    allowed = {field.name for field in fields(cls)}
    kwargs = {key: value for key, value in data.items() if key != "mechanism"}
    for key in kwargs:
        if key not in allowed:
            raise InvalidParameterError(key, f"not set: {mech} takes {sorted(allowed)}", kwargs[key])
    tuples = {field.name for field in fields(cls) if str(field.type).startswith("tuple")}
    kwargs = {key: tuple(value) if key in tuples and isinstance(value, list) else value for key, value in kwargs.items()}
    missing = [f.name for f in fields(cls) if f.init and f.name not in kwargs
               and f.default is MISSING and f.default_factory is MISSING]  # fmt: skip
    if missing:  # named as the JSON/TOML keys they are (never a Python __init__() message)
        raise InvalidParameterError("params", f"{mech} params with {' and '.join(missing)} (missing)", sorted(kwargs))
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise InvalidParameterError("params", f"complete {mech} params ({exc})", sorted(kwargs)) from None


# -------------------------------------------------------------------------------------- secret sampling
AMPLIFIED_EPSILON_NOTE = (
    "the amplified ε covers a device's reports of one day (one sampling draw covers them all) and holds only "
    "against an observer of the aggregate or of shuffled reports who does not know which devices were sampled; "
    "the ingest server sees who connects, so against it each report is ε-LDP; a permanent randomized response's "
    "lifetime level (ε∞) is not amplified across days"
)


def check_sample_rate(value: object) -> float:
    """A metric's ``sample_rate`` β: a number in (0, 1] (1: every device takes part)."""
    allowed = "a number in (0, 1] (the share of devices that take part each day)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError("sample_rate", allowed, value)
    try:
        beta = float(value)
    except OverflowError:  # an integer beyond float64 (JSON allows any): a 400, never a 500
        raise InvalidParameterError("sample_rate", allowed, "an integer too large for a float") from None
    if not 0.0 < beta <= 1.0:
        raise InvalidParameterError("sample_rate", allowed, value)
    return beta


def amplified_epsilon(epsilon: float, sample_rate: float) -> float:
    """ln(1 + β(e^ε − 1)): privacy amplification by secret subsampling (Li, Qardaji, Su, ASIACCS 2012)."""
    return math.log1p(sample_rate * math.expm1(epsilon))


# -------------------------------------------------------------------------------------------- MetricSpec
@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """A named, versioned metric: mechanism params plus the device reporting policy.

    ``reports_per_day`` is how many reports one device may send per UTC day; its daily privacy spend is
    ``report_charge × reports_per_day`` (:attr:`daily_epsilon`), where the charge of one report is its
    effective ε, or more under a permanent randomized response (:attr:`report_charge`). The privatization (``params`` and
    ``reports_per_day``) is fixed per ``version``: changing it is a new version, and sketches are kept per
    version and never mixed. The metadata (:data:`METADATA_FIELDS`: ``description``, ``owner``, ``expires``,
    a UTC day after which the metric is listed as expired, and ``notes``) is edited in place.
    """

    name: str
    params: Params
    version: int = 1
    reports_per_day: int = 1
    description: str = ""
    owner: str = ""
    expires: str | None = None
    notes: str = ""
    sample_rate: float = 1.0
    breakdown: tuple[str, ...] = ()  # profile dimensions, in order (ldptel.client.protocol.breakdown; not privatized)
    # the declared values of each breakdown dimension (the registry's profile schema, copied in by the registry and
    # kept current in place: growing an enumeration is not a new version); devices send any other value as 'other'
    profile: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.fullmatch(self.name):
            raise InvalidParameterError("name", NAME_RULE, self.name)
        if on_device(mechanism_of(self.params)) is not None and self.reports_per_day != 1:  # any registered mechanism's
            raise InvalidParameterError(  # the device reports once per period: a larger daily budget would be unused
                "reports_per_day", "1 for a metric aggregated on the device (one report per period)", self.reports_per_day)
        check_int("version", self.version, 1, (1 << 31) - 1)
        check_int("reports_per_day", self.reports_per_day, 1, MAX_REPORTS_PER_DAY)
        check_text("description", self.description, MAX_DESCRIPTION_CHARS)
        check_text("owner", self.owner, MAX_OWNER_CHARS)
        check_text("notes", self.notes, MAX_NOTES_CHARS)
        if self.expires is not None:
            check_day(self.expires, what="expires")
        object.__setattr__(self, "sample_rate", check_sample_rate(self.sample_rate))
        object.__setattr__(self, "breakdown", check_dimensions(self.breakdown))
        try:
            profile = ProfileSchema(dict(self.profile.items() if isinstance(self.profile, dict) else self.profile))
        except (TypeError, ValueError):
            raise InvalidParameterError("profile", "a table of dimension = [values]", self.profile) from None
        extra = [d for d in profile.dimensions if d not in self.breakdown]
        if extra:
            raise InvalidParameterError("profile", f"values of the breakdown dimensions {list(self.breakdown)} only", extra)
        object.__setattr__(self, "profile", tuple((d, profile.dimensions[d]) for d in self.breakdown
                                                  if d in profile.dimensions))

    @property
    def mechanism(self) -> str:
        return self.params.mechanism

    @property
    def effective_epsilon(self) -> float:
        return self.params.effective_epsilon

    @property
    def report_charge(self) -> float:
        """ε one report costs given every other report of its device: the effective ε, or ε_irr under a
        permanent randomized response (:func:`~ldptel.client.mechanisms.longitudinal.report_charge`)."""
        return report_charge(self.params)

    @property
    def daily_epsilon(self) -> float:
        """Privacy spent by a device that uses its whole daily policy: ``reports_per_day`` × :attr:`report_charge`,
        whatever the values (the reports of one day together, given every other report of the device)."""
        return self.report_charge * self.reports_per_day

    def same_privatization(self, other: MetricSpec) -> bool:
        """Devices privatize, budget and sample alike: equal params, ``reports_per_day`` and ``sample_rate``
        (metadata aside)."""
        return (self.params == other.params and self.reports_per_day == other.reports_per_day
                and self.sample_rate == other.sample_rate and self.breakdown == other.breakdown)

    @property
    def amplified_epsilon(self) -> float:
        """ln(1 + β(e^ε − 1)) with ε = :attr:`daily_epsilon`, β = ``sample_rate``: the ε of a device's reports of
        one day (one sampling draw covers all of them, so the day's composition is what is sampled, not each
        report) against an observer of the aggregate or the shuffled reports who does not know which devices were
        sampled (:data:`AMPLIFIED_EPSILON_NOTE`); against the ingest server, which sees who connects, each report is
        still ``effective_epsilon``-LDP, and a permanent randomization's lifetime level is not amplified."""
        return amplified_epsilon(self.daily_epsilon, self.sample_rate)

    def expired(self, today: str) -> bool:
        """Past its ``expires`` day (``today`` is a UTC day ``YYYY-MM-DD``)."""
        return self.expires is not None and self.expires < today

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "params": self.params.to_dict(),
            "reports_per_day": self.reports_per_day,
            "description": self.description,
            "owner": self.owner,
            "expires": self.expires,
            "notes": self.notes,
            "effective_epsilon": self.effective_epsilon,
            **({} if self.sample_rate == 1.0 else {"sample_rate": self.sample_rate}),  # older SDKs never see the key
            **({"breakdown": list(self.breakdown), "profile": {d: list(v) for d, v in self.profile}}
               if self.breakdown else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: object) -> MetricSpec:
        if not isinstance(data, dict):
            raise InvalidParameterError("metric", "a JSON object", type(data).__name__)
        allowed = {"name", "version", "params", "reports_per_day", *METADATA_FIELDS, "effective_epsilon", "sample_rate",
                   "breakdown", "profile"}
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
            owner=data.get("owner", ""),
            expires=data.get("expires"),
            notes=data.get("notes", ""),
            sample_rate=data.get("sample_rate", 1.0),
            breakdown=data.get("breakdown", ()),
            profile=data.get("profile", ()),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MetricSpec:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidParameterError("metric", "valid JSON", str(exc)) from None
        return cls.from_dict(data)

    @property
    def profile_schema(self) -> ProfileSchema:
        """The declared values of the breakdown dimensions (values outside them are sent and counted as 'other')."""
        return ProfileSchema(dict(self.profile))

    def with_version(self, version: int) -> MetricSpec:
        return replace(self, version=version)

