"""The registry of mechanisms: name and wire code → :class:`~ldptel.client.mechanisms.base.Mechanism`.

Adding a mechanism is one new module in this package that defines its params, batch and Mechanism object,
plus one line in :data:`_MECHANISMS` below (and its tests). Nothing outside the package names a mechanism.
"""

from __future__ import annotations

from typing import Any

from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.mechanisms.cms import CMS
from ldptel.client.mechanisms.daily_mean import DAILY_MEAN
from ldptel.client.mechanisms.discovery import PEM
from ldptel.client.mechanisms.event_count import EVENT_COUNT
from ldptel.client.mechanisms.event_histogram import EVENT_HISTOGRAM
from ldptel.client.mechanisms.grr import GRR
from ldptel.client.mechanisms.hcms import HCMS
from ldptel.client.mechanisms.histogram import HISTOGRAM
from ldptel.client.mechanisms.mean import MEAN
from ldptel.client.mechanisms.oue_cms import OUE_CMS
from ldptel.client.mechanisms.rr import RR
from ldptel.client.mechanisms.unique_devices import UNIQUE_DEVICES
from ldptel.client.protocol.params import ParamsBase

AnyMechanism = Mechanism[Any, Any]

_MECHANISMS: tuple[AnyMechanism, ...] = (RR, GRR, CMS, HCMS, OUE_CMS)
_MECHANISMS += (PEM,)  # discovery of values nobody listed (issue 16)
_MECHANISMS += (MEAN, HISTOGRAM, DAILY_MEAN)  # numeric
_MECHANISMS += (EVENT_COUNT, EVENT_HISTOGRAM, UNIQUE_DEVICES)  # aggregated on the device (issue 29): Reporter.count()
_BY_NAME: dict[str, AnyMechanism] = {m.name: m for m in _MECHANISMS}
_BY_CODE: dict[int, AnyMechanism] = {m.code: m for m in _MECHANISMS}
assert len(_BY_NAME) == len(_BY_CODE) == len(_MECHANISMS), "mechanism names and wire codes must be unique"
_BUILT_IN = _MECHANISMS


def register(mechanism: AnyMechanism) -> None:
    """Add a mechanism defined outside this package (a plugin; the new-kind test registers a copied module): its
    name and wire code must be new. Everything else (specs, ingest, fold, queries, CLI, dashboard, plan) asks the
    registry and the mechanism's capability types, so nothing more is needed."""
    global _MECHANISMS
    if not isinstance(mechanism, Mechanism):
        raise InvalidParameterError("mechanism", "a Mechanism object", mechanism)
    if mechanism.name in _BY_NAME or mechanism.code in _BY_CODE:
        raise InvalidParameterError("mechanism", "a new name and wire code", f"{mechanism.name} (code {mechanism.code})")
    _MECHANISMS += (mechanism,)
    _BY_NAME[mechanism.name] = _BY_CODE[mechanism.code] = mechanism


def unregister(name: str) -> None:
    """Remove a mechanism :func:`register` added (the built-in ones stay)."""
    global _MECHANISMS
    mech = get_mechanism(name)
    if mech in _BUILT_IN:
        raise InvalidParameterError("mechanism", "one added with register()", name)
    _MECHANISMS = tuple(m for m in _MECHANISMS if m is not mech)
    del _BY_NAME[mech.name], _BY_CODE[mech.code]


def mechanisms() -> tuple[AnyMechanism, ...]:
    """Every registered mechanism, in registration order."""
    return _MECHANISMS


def mechanism_names(*, having: type[AnyMechanism] | None = None, lacking: type[AnyMechanism] | None = None) -> tuple[str, ...]:
    """Registered names; ``having``/``lacking``: only those that have (or lack) a capability type of
    :mod:`~ldptel.client.mechanisms.capabilities` (``having=Sketch``: estimates asked for candidate values)."""
    return tuple(
        m.name for m in _MECHANISMS
        if (having is None or isinstance(m, having)) and (lacking is None or not isinstance(m, lacking))
    )


def get_mechanism(name: str) -> AnyMechanism:
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise InvalidParameterError("mechanism", f"one of {list(_BY_NAME)}", name) from None


def mechanism_by_code(code: int) -> AnyMechanism | None:
    """The mechanism of a wire code, or None for an unknown code."""
    return _BY_CODE.get(code)


def mechanism_codes() -> list[int]:
    return sorted(_BY_CODE)


def mechanism_of(params: object) -> AnyMechanism:
    """The mechanism of a params object (any registered mechanism's params type)."""
    mech = _BY_NAME.get(params.mechanism) if isinstance(params, ParamsBase) else None
    if mech is None or not isinstance(params, mech.params_type):
        allowed = ", ".join(m.params_type.__name__ for m in _MECHANISMS)
        raise InvalidParameterError("params", f"mechanism params ({allowed})", params)
    return mech
