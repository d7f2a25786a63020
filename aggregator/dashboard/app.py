"""The dashboard's Flask app: the operator-token gate, the JSON API and the pages (a view of that API).

Every chart of a page is drawn from one JSON endpoint, and each endpoint returns exactly the document the CLI
prints with ``--format json``:

* ``GET /api/metrics``: the metric list (:func:`~ldptel.aggregator.dashboard.overview.metric_list`) under ``metrics``;
* ``GET /api/metrics/<name>``: one metric of that list;
* ``GET|POST /api/metrics/<name>/estimate``: ``ldptel estimate NAME ... --format json``
  (:func:`~ldptel.aggregator.query.estimate_metric`);
* ``GET|POST /api/metrics/<name>/by-day``: ``ldptel estimate NAME --by-day ... --format json``
  (:func:`~ldptel.aggregator.query.estimate_by_day`);
* ``GET /api/metrics/<name>/discover``: ``ldptel discover NAME ... --format json``
  (:func:`~ldptel.aggregator.discover.discover_metric`; its defaults: top 20, keep 50, α 0.05).

Query parameters (GET) or a JSON object (POST, for long candidate lists) name the CLI's options: ``from``,
``to``, ``day``, ``version``, ``candidate`` (repeatable; a JSON list), ``candidates`` (text, one per line),
``top``, ``confidence``, ``postprocess``, ``estimator``, ``percentiles`` (levels separated by commas, or a
JSON list); discovery takes ``from``, ``to``, ``day``, ``version``, ``top``, ``keep``, ``threshold``,
``alpha``, ``confidence``. Bad input is a 4xx JSON ``{"error", "message"}``.

Authentication reuses the ingest service's: ``Authorization: Bearer <token>`` compared by SHA-256 digest in
constant time (:mod:`ldptel.server.state`). Browsers log in at ``/login``: each login gets its own random session
id (:mod:`.sessions`, 256 bits, in this process's memory only) in a cookie that is HttpOnly, SameSite=Strict,
``Max-Age`` the session's life (``LDPTEL_DASHBOARD_SESSION_SECONDS``, default 8 h, never extended) and ``Secure``
when the request came over TLS (served with TLS, or ``X-Forwarded-Proto: https`` from a proxy declared in
``LDPTEL_TRUSTED_PROXIES``; the header is ignored from anyone else). ``/logout`` revokes the session on the
server: the old cookie is refused from then on. Failed logins and wrong bearer tokens are limited per source
(:class:`ldptel.server.ratelimit.SourceFailureLimiter`: 10, then one more every 30 s; the real client behind a
declared proxy, :mod:`ldptel.server.proxies`; a keyed hash in memory, never logged): over the limit, a login or
bearer request gets 429 whether its token is right or not (the dashboard token is a secret: no oracle).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import redis as redis_lib
from flask import Blueprint, Flask, Response, current_app, redirect, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from ldptel.aggregator.breakdowns import estimate_breakdown, parse_where
from ldptel.aggregator.dashboard.candidates import shipped_candidates
from ldptel.aggregator.dashboard.config import DashboardConfig
from ldptel.aggregator.dashboard.overview import metric_list
from ldptel.aggregator.dashboard.sessions import SessionStore
from ldptel.aggregator.defaults import DISCOVER_ALPHA, DISCOVER_KEEP, DISCOVER_TOP, default_confidence
from ldptel.aggregator.discover import DiscoverOptions, discover_metric
from ldptel.aggregator.json_api import versioned
from ldptel.aggregator.query import EmptyRangeError, QueryOptions, estimate_by_day, estimate_metric
from ldptel.aggregator.render import json_text
from ldptel.client.errors import InvalidParameterError, LdpError
from ldptel.server.proxies import TrustedProxies
from ldptel.server.ratelimit import SourceFailureLimiter
from ldptel.server.state import bearer_digest, digest, digest_in
from ldptel.storage import registry
from ldptel.storage.registry import UnknownMetricError, UnknownVersionError

log = logging.getLogger("ldptel.dashboard")
EXTENSION = "ldptel_dashboard"
AUTH_EXTENSION = "ldptel_dashboard_auth"
COOKIE = "ldptel_dashboard"
LOGIN_FAILURE_BURST = 10  # failed logins (or wrong bearer tokens) per source before 429 ...
LOGIN_FAILURE_RATE = 1 / 30  # ... then one more every 30 s
QUERY_KEYS = ("from", "to", "day", "version", "candidate", "candidates", "top", "confidence", "postprocess", "estimator",
              "percentiles", "by", "where")
DISCOVER_KEYS = ("from", "to", "day", "version", "top", "keep", "threshold", "alpha", "confidence", "by", "where")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

api = Blueprint("api", __name__, url_prefix="/api")
pages = Blueprint("pages", __name__)


class ApiError(LdpError):
    """An answer ``{"error": code, "message": ...}`` with an HTTP status (and ``Retry-After`` when set)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after: int | None = None


def _state() -> tuple[DashboardConfig, redis_lib.Redis]:
    config, client = current_app.extensions[EXTENSION]
    return config, client


class _Auth:
    """The login state of one dashboard process: sessions, the failure limiter and the declared proxies."""

    def __init__(self, config: DashboardConfig) -> None:
        self.sessions = SessionStore(ttl=config.session_seconds)
        self.failures = SourceFailureLimiter(rate=LOGIN_FAILURE_RATE, burst=LOGIN_FAILURE_BURST)
        self.proxies = TrustedProxies(config.trusted_proxies)
        self.token_digest = digest(config.token)

    def source(self) -> str:
        """The request's source for the failure limit (the real client behind a declared proxy; never log it)."""
        return self.proxies.source(request.environ)

    def blocked(self, source: str) -> float:
        return self.failures.blocked(source)

    def secure(self) -> bool:
        """Whether the browser reached us over TLS: directly, or through a declared proxy that says so."""
        if request.scheme == "https":
            return True
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return proto == "https" and self.proxies.peer_is_trusted(request.environ)


def _auth() -> _Auth:
    auth = current_app.extensions[AUTH_EXTENSION]
    assert isinstance(auth, _Auth)
    return auth


def _too_many(wait: float) -> ApiError:
    error = ApiError(429, "rate_limited", f"too many failed logins from this address; retry in {max(1, round(wait))} s")
    error.retry_after = max(1, int(wait + 0.999))
    return error


def _authenticated() -> bool:
    """A valid session cookie, or a valid bearer token (a wrong one counts against its source; 429 over the
    limit, whatever the token)."""
    auth = _auth()
    header = request.headers.get("Authorization")
    if header is not None:
        source = auth.source()
        got = bearer_digest(header)
        ok = got is not None and digest_in(got, (auth.token_digest,))
        wait = auth.blocked(source)
        if wait > 0:
            raise _too_many(wait)
        if not ok:
            auth.failures.failed(source)
        return ok
    return auth.sessions.valid(request.cookies.get(COOKIE, ""))


def _json(document: Any, status: int = 200) -> Response:
    return Response(json_text(document, indent=None), status=status, mimetype="application/json")


# ------------------------------------------------------------------------------------------------- API
def _int(key: str, raw: object) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise InvalidParameterError(key, "an integer >= 1", raw) from None
    if value < 1:
        raise InvalidParameterError(key, "an integer >= 1", raw)
    return value


def _float(key: str, raw: object, allowed: str) -> float:
    try:
        return float(str(raw))
    except ValueError:
        raise InvalidParameterError(key, allowed, raw) from None


def _percentiles(raw: object) -> list[float]:
    """``50,90,99`` (the CLI's ``--percentiles``) or a JSON list of numbers; the range is checked by the query."""
    items = raw if isinstance(raw, list) else str(raw).split(",")
    allowed = "numbers in (0, 100) separated by commas"
    return [_float("percentiles", v.strip() if isinstance(v, str) else v, allowed) for v in items]


def _range_options(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The options every query shares: the day range, ``version``, ``top`` and ``confidence``."""
    unknown = sorted(set(source) - set(keys))
    if unknown:
        raise InvalidParameterError("parameter", f"one of {list(keys)}", unknown[0])
    options: dict[str, Any] = {}
    day = source.get("day") or None  # like the CLI's --day: both ends of the range
    options["day_from"] = day or source.get("from") or None
    options["day_to"] = day or source.get("to") or None
    for key in ("day_from", "day_to"):
        if options[key] is not None and not isinstance(options[key], str):
            raise InvalidParameterError(key.replace("day_", ""), "a UTC day YYYY-MM-DD", options[key])
    for key in ("version", "top"):
        if source.get(key) not in (None, ""):
            options[key] = _int(key, source[key])
    if source.get("confidence") not in (None, ""):
        options["confidence"] = _float("confidence", source["confidence"], "a number in (0, 1)")
    if source.get("where") not in (None, ""):  # breakdowns: "os=android,channel=beta" (the CLI's --where)
        options["where"] = parse_where([str(source["where"])])
    return options


def _by(source: Mapping[str, Any]) -> list[str]:
    """``by``: breakdown dimensions separated by commas (the CLI's ``--by``); [] when absent."""
    raw = source.get("by")
    return [] if raw in (None, "") else [d.strip() for d in str(raw).split(",") if d.strip()]


def _source() -> Mapping[str, Any]:
    body = request.get_json(silent=True) if request.method == "POST" else None
    return body if isinstance(body, dict) else {k: request.args.get(k) for k in request.args}


def query_options(source: Mapping[str, Any], candidates: list[str]) -> QueryOptions:
    """The :class:`QueryOptions` of request parameters (``candidates`` gathered)."""
    options = _range_options(source, QUERY_KEYS)
    options["candidates"] = candidates or None
    if source.get("percentiles") not in (None, ""):
        options["percentiles"] = _percentiles(source["percentiles"])
    for key in ("postprocess", "estimator"):
        if source.get(key) not in (None, ""):
            options[key] = source[key]
    return QueryOptions(**options)


def discover_options(source: Mapping[str, Any]) -> DiscoverOptions:
    """The :class:`DiscoverOptions` of request parameters, with ``ldptel discover``'s defaults."""
    options = _range_options(source, DISCOVER_KEYS)
    options.setdefault("top", DISCOVER_TOP)
    options.setdefault("confidence", default_confidence())
    options["keep"] = _int("keep", source["keep"]) if source.get("keep") not in (None, "") else DISCOVER_KEEP
    options["alpha"] = DISCOVER_ALPHA
    if source.get("alpha") not in (None, ""):
        options["alpha"] = _float("alpha", source["alpha"], "a number in (0, 1)")
    if source.get("threshold") not in (None, ""):
        options["threshold"] = _float("threshold", source["threshold"], "a number of standard errors > 0")
    return DiscoverOptions(**options)


def _candidates_from(text: object) -> list[str]:
    if not isinstance(text, str):
        raise InvalidParameterError("candidates", "text, one value per line", text)
    lines = (line.strip() for line in text.lstrip("\ufeff").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _request_options() -> QueryOptions:
    """GET: the query string; POST: a JSON object with the same keys (``candidate`` may be a list)."""
    if request.method == "POST":
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise ApiError(400, "bad_request", "the body must be a JSON object of query parameters")
        listed = body.get("candidate") or []
        if isinstance(listed, str):
            listed = [listed]
        if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
            raise InvalidParameterError("candidate", "a list of strings", listed)
        source: Mapping[str, Any] = body
    else:
        listed = request.args.getlist("candidate")
        source = {k: request.args.get(k) for k in request.args}
    candidates = list(listed)
    if source.get("candidates"):
        candidates += _candidates_from(source["candidates"])
    return query_options(source, candidates)


@api.get("/metrics")
def metrics() -> Response:
    _, r = _state()
    return _json(versioned("dashboard-metrics", {"metrics": metric_list(r)}))


@api.get("/metrics/<name>")
def metric(name: str) -> Response:
    _, r = _state()
    return _json(versioned("dashboard-metric", metric_list(r, [name])[0]))


@api.route("/metrics/<name>/estimate", methods=["GET", "POST"])
def estimate(name: str) -> Response:
    _, r = _state()
    by = _by(_source())
    if by:  # ldptel estimate NAME --by DIMS: the total and one result per group (small multiples on the page)
        return _json(versioned("breakdown", estimate_breakdown(r, name, by, _request_options()).to_dict()))
    return _json(versioned("result", estimate_metric(r, name, _request_options()).to_dict()))


@api.route("/metrics/<name>/by-day", methods=["GET", "POST"])
def by_day(name: str) -> Response:
    _, r = _state()
    return _json(versioned("result", estimate_by_day(r, name, _request_options()).to_dict()))


@api.get("/metrics/<name>/discover")
def discover(name: str) -> Response:
    _, r = _state()
    source = {k: request.args.get(k) for k in request.args}
    by = _by(source)
    if by:
        return _json(versioned("breakdown", estimate_breakdown(r, name, by, discover_options(source),
                                                               query=discover_metric).to_dict()))
    return _json(versioned("result", discover_metric(r, name, discover_options(source)).to_dict()))


@api.get("/candidate-lists")
def candidate_lists() -> Response:
    """The candidate lists shipped with the package (a sketch metric's page offers them when it has none)."""
    return _json([{"name": c.name, "count": len(c.values), "description": c.description} for c in shipped_candidates()])


@api.get("/candidate-lists/<name>")
def candidate_list(name: str) -> Response:
    for c in shipped_candidates():
        if c.name == name:
            return _json({"name": c.name, "description": c.description, "values": list(c.values)})
    return _json({"error": "not_found", "message": f"no shipped candidate list {name!r}; "
                  f"shipped: {', '.join(c.name for c in shipped_candidates())}"}, status=404)


# ----------------------------------------------------------------------------------------------- pages
@pages.get("/")
def index() -> str:
    return render_template("index.html")


@pages.get("/metrics/<name>")
def metric_page(name: str) -> str:
    _, r = _state()
    registry.get_metric(r, name)  # an unknown name is a 404 page
    return render_template("metric.html", name=name)


def _safe_next(target: str | None) -> str:
    """Only a path on this server (no scheme, host or ``//``) is followed after logging in."""
    if not target or not target.startswith("/") or target.startswith("//") or urlsplit(target).netloc:
        return "/"
    return target


@pages.route("/login", methods=["GET", "POST"])
def login() -> BaseResponse | tuple[str, int]:
    auth = _auth()
    target = _safe_next(request.values.get("next"))
    if request.method == "GET":
        return render_template("login.html", next=target, failed=False), 200
    token = (request.form.get("token") or "").strip()
    right = token.isascii() and digest_in(digest(token), (auth.token_digest,))  # the same work either way
    source = auth.source()
    wait = auth.blocked(source)
    if wait > 0:  # before the answer depends on the token: a right guess looks like a wrong one
        raise _too_many(wait)
    if not right:
        auth.failures.failed(source)
        return render_template("login.html", next=target, failed=True), 401
    resp = redirect(target, code=303)
    resp.set_cookie(COOKIE, auth.sessions.create(), max_age=int(auth.sessions.ttl), httponly=True,
                    samesite="Strict", secure=auth.secure())
    return resp


@pages.post("/logout")
def logout() -> BaseResponse:
    """Revoke the session on the server (its cookie is refused from now on) and delete the cookie."""
    auth = _auth()
    auth.sessions.revoke(request.cookies.get(COOKIE, ""))
    resp = redirect("/login", code=303)
    resp.delete_cookie(COOKIE, httponly=True, samesite="Strict", secure=auth.secure())
    return resp


# --------------------------------------------------------------------------------------------- the app
_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (UnknownMetricError, 404, "unknown_metric"),
    (UnknownVersionError, 404, "unknown_version"),
    (EmptyRangeError, 404, "no_data"),
    (LdpError, 400, "bad_request"),  # InvalidParameterError and every other user error
)


def _error(status: int, code: str, message: str) -> Response | tuple[str, int]:
    if request.path.startswith("/api/"):
        return _json({"error": code, "message": message}, status)
    return render_template("error.html", status=status, message=message), status


def _handle(exc: Exception) -> Response | tuple[str, int]:
    if isinstance(exc, ApiError):
        answer = _error(exc.status, exc.code, exc.message)
        if exc.retry_after is not None:
            resp = answer if isinstance(answer, Response) else Response(answer[0], status=answer[1], mimetype="text/html")
            resp.headers["Retry-After"] = str(exc.retry_after)
            return resp
        return answer
    if isinstance(exc, HTTPException):
        return _error(exc.code or 500, (exc.name or "error").lower().replace(" ", "_"), exc.description or "")
    if isinstance(exc, (redis_lib.ConnectionError, redis_lib.TimeoutError)):
        return _error(503, "redis_unavailable", "Redis is unreachable; retry later")
    for kind, status, code in _ERRORS:
        if isinstance(exc, kind):
            return _error(status, code, str(exc))
    log.exception("dashboard: unexpected error on %s %s", request.method, request.path)
    return _error(500, "internal", "unexpected error (logged)")


def _gate() -> BaseResponse | tuple[str, int] | None:
    if request.endpoint in ("pages.login", "static") or _authenticated():
        return None
    if request.path.startswith("/api/"):
        resp = _json({"error": "unauthorized", "message": "send 'Authorization: Bearer <dashboard token>'"}, 401)
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    return redirect(f"/login?next={request.full_path.rstrip('?')}", code=303)


def _headers(resp: Response) -> Response:
    for key, value in SECURITY_HEADERS.items():
        resp.headers.setdefault(key, value)
    return resp


def create_dashboard(config: DashboardConfig | None = None) -> Flask:
    """The dashboard app (``config`` defaults to :meth:`DashboardConfig.from_env`; gunicorn can run
    ``'ldptel.aggregator.dashboard:create_dashboard()'``)."""
    config = DashboardConfig.from_env() if config is None else config
    app = Flask(__name__, static_folder="static", template_folder="templates")
    client = redis_lib.Redis.from_url(config.redis_url, socket_connect_timeout=5.0, socket_timeout=30.0)
    app.extensions[EXTENSION] = (config, client)
    app.extensions[AUTH_EXTENSION] = _Auth(config)
    app.before_request(_gate)
    app.after_request(_headers)
    app.register_error_handler(Exception, _handle)
    app.register_blueprint(api)
    app.register_blueprint(pages)
    return app
