"""The real client address behind a reverse proxy the operator declared trusted (``LDPTEL_TRUSTED_PROXIES``).

Used for one thing only: the failed-authentication limit per source (:class:`ldptel.server.ratelimit.
SourceFailureLimiter`), which hashes it with a per-process random key and keeps it in memory. The address is
never logged, stored, sent or put in a Prometheus label; it lives for the duration of one request.

The rule (:meth:`TrustedProxies.source`):

* when the TCP peer (``REMOTE_ADDR``) is not a declared proxy, the source is the peer. Whatever a client wrote in
  ``X-Forwarded-For`` is ignored: nobody can move their failures onto someone else's address or escape the limit
  by rotating a header;
* when the peer is a declared proxy, ``X-Forwarded-For`` is read from the right: entries that are themselves
  declared proxies are skipped (a chain of trusted proxies), and the first other entry is the client. Entries to
  its left were written by the client or an untrusted hop and are never looked at. No header, an unparseable
  entry, or only proxies: the source is the peer (all such requests share one budget: fail closed).
  ``deploy/nginx.conf`` replaces the header with the address nginx itself saw (``$remote_addr``), so a client
  cannot send one through it;
* the source is the address, except that an IPv6 client is keyed by its /64 (one subscriber's prefix: a host
  with a /64 could otherwise fail 2⁶⁴ times) and an IPv4-mapped IPv6 address by its IPv4 address.

``X-Real-IP`` and ``Forwarded`` (RFC 7239) are never read: one header, one rule.

A forgotten setting is loud (:class:`UndeclaredProxyCheck`). A request that carries ``X-Forwarded-For`` from a
peer that is not declared usually means a proxy sits in front and ``LDPTEL_TRUSTED_PROXIES`` was not set: then
every request's source is the proxy, so anyone's wrong tokens spend one shared budget and lock the admin and
metrics tokens out (429) for everyone. Such a request is counted in ``ldptel_forwarded_from_undeclared_peer_total``
and the first one logs one warning per process; neither names the peer or the header's value. Its source stays
the peer (believing the header would let any client choose the address it is limited under).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ldptel.client.errors import LdpError

__all__ = ["ProxyConfigError", "TrustedProxies", "UndeclaredProxyCheck", "parse_trusted_proxies"]

log = logging.getLogger("ldptel.server")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_XFF = "HTTP_X_FORWARDED_FOR"
_MAX_HOPS = 16  # entries read from the right of X-Forwarded-For at most


class ProxyConfigError(LdpError, ValueError):
    """A ``LDPTEL_TRUSTED_PROXIES`` entry is not an address or network (the message names it)."""


def parse_trusted_proxies(text: str) -> tuple[Network, ...]:
    """``"127.0.0.1, 10.0.0.0/8, ::1"`` → networks. Empty → none. ``0.0.0.0/0`` and ``::/0`` are refused:
    trusting every peer would let any client choose the address it is limited under."""
    networks: list[Network] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ProxyConfigError(
                f"{entry!r} is not an IP address or network (give addresses or CIDR networks, comma-separated, "
                "e.g. 127.0.0.1,10.0.0.0/8)") from None
        if network.prefixlen == 0:
            raise ProxyConfigError(f"{entry!r} would trust every peer: name the proxies' own addresses or networks")
        networks.append(network)
    return tuple(networks)


def _address(text: str) -> Address | None:
    """An address from an ``X-Forwarded-For`` entry or ``REMOTE_ADDR`` (``[v6]:port`` and ``v4:port`` accepted)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # v4:port (a v6 address has at least two colons)
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _key(address: Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class TrustedProxies:
    """The declared proxies; :meth:`source` gives a request's rate-limit source."""

    def __init__(self, networks: Iterable[Network] = ()) -> None:
        self.networks = tuple(networks)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: Address | None) -> bool:
        return address is not None and any(address in network for network in self.networks)

    def peer_is_trusted(self, environ: Mapping[str, Any]) -> bool:
        """Whether the request came straight from a declared proxy (so its forwarding headers may be read)."""
        return bool(self.networks) and self.trusts(_address(str(environ.get("REMOTE_ADDR") or "")))

    def source(self, environ: Mapping[str, Any]) -> str:
        """The limiter's key for this request (see the module docstring). Never log or store it."""
        peer_text = str(environ.get("REMOTE_ADDR") or "")
        peer = _address(peer_text)
        if peer is None:
            return peer_text  # a UNIX socket or a test client: one source
        if self.networks and self.trusts(peer):
            hops = str(environ.get(_XFF) or "").split(",")
            for entry in reversed(hops[-_MAX_HOPS:]):
                address = _address(entry)
                if address is None:
                    break
                if not self.trusts(address):
                    return _key(address)
        return _key(peer)


UNDECLARED_WARNING = (
    "a request carried X-Forwarded-For from a peer that is not in LDPTEL_TRUSTED_PROXIES: if a reverse proxy is in "
    "front of this service, declare it (nginx on the same host: its loopback address, see deploy/nginx.conf), or every "
    "request counts as the proxy's and anyone's wrong tokens lock the admin and metrics tokens out (429); "
    "counted in ldptel_forwarded_from_undeclared_peer_total; logged once per process")


class UndeclaredProxyCheck:
    """WSGI middleware: counts requests with ``X-Forwarded-For`` from an undeclared peer (``count``) and logs
    :data:`UNDECLARED_WARNING` once per process. Never logs the peer or the header. Costs one dict lookup on a
    request without the header; peers' verdicts are cached (a few proxies in practice; the cache is bounded)."""

    _CACHE_MAX = 1024

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], proxies: TrustedProxies,
                 count: Callable[[], None]) -> None:
        self.wsgi_app = wsgi_app
        self.proxies = proxies
        self.count = count
        self._trusted: dict[str, bool] = {}
        self._warned = False
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if _XFF in environ:
            peer = str(environ.get("REMOTE_ADDR") or "")
            trusted = self._trusted.get(peer)
            if trusted is None:
                trusted = self.proxies.trusts(_address(peer))
                if len(self._trusted) >= self._CACHE_MAX:
                    self._trusted.clear()
                self._trusted[peer] = trusted
            if not trusted:
                self.count()
                if not self._warned:
                    with self._lock:
                        if not self._warned:
                            self._warned = True
                            log.warning(UNDECLARED_WARNING)
        return self.wsgi_app(environ, start_response)
