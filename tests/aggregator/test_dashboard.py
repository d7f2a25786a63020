"""The dashboard's app without a browser: the token gate, the JSON API (the CLI's documents), 4xx for bad input."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldptel.aggregator.cli import main
from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
from ldptel.aggregator.dashboard.app import COOKIE, EXTENSION
from ldptel.server.config import ConfigError
from ldptel.storage import registry
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import append_reports
from tests.aggregator.dashboard_data import Populated, day_list, populate, populate_more, running_dashboard, snapshot

TOKEN = "dash-0123456789abcdef-ABCDEFGHIJ-xyz"
DAYS = day_list("2026-03-04", 4)


def cli_json(*argv: str) -> object:
    out, err = io.StringIO(), io.StringIO()
    assert main(list(argv), stdout=out, stderr=err) == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.fixture
def data(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Populated:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    return snapshot(redis, ("populate", DAYS, 1500), lambda: populate(redis, days=DAYS, per_day=1500))


@pytest.fixture
def dash(data: Populated, redis_url: str) -> Iterator[FlaskClient]:
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url))
    yield app.test_client()
    app.extensions[EXTENSION][1].close()  # the app's Redis client


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_pages_and_api_need_the_token(dash: FlaskClient) -> None:
    resp = dash.get("/api/metrics")
    assert resp.status_code == 401 and resp.get_json()["error"] == "unauthorized" and resp.headers["WWW-Authenticate"]
    assert dash.get("/api/metrics", headers=bearer("x" + TOKEN)).status_code == 401
    page = dash.get("/metrics/emoji?top=3")
    assert page.status_code == 303 and page.headers["Location"] == "/login?next=/metrics/emoji?top=3"
    dash.set_cookie(COOKIE, TOKEN)  # the token itself is not a session
    assert dash.get("/").status_code == 303
    assert dash.get("/api/metrics", headers=bearer()).status_code == 200


def test_login_sets_a_cookie_that_is_not_the_token(dash: FlaskClient) -> None:
    bad = dash.post("/login", data={"token": "wrong-token", "next": "/metrics/emoji"})
    assert bad.status_code == 401 and "not the dashboard" in bad.get_data(as_text=True)
    ok = dash.post("/login", data={"token": TOKEN, "next": "/metrics/emoji"})
    assert ok.status_code == 303 and ok.headers["Location"] == "/metrics/emoji"
    cookie = ok.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    page = dash.get("/metrics/emoji")
    assert page.status_code == 200 and 'data-metric="emoji"' in page.get_data(as_text=True)
    assert "script-src" not in page.headers["Content-Security-Policy"] and "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert dash.get("/api/metrics").status_code == 200
    assert dash.post("/logout").status_code == 303
    assert dash.get("/api/metrics").status_code == 401
    for target in ("//evil.example/x", "https://evil.example/", "evil"):
        assert dash.post("/login", data={"token": TOKEN, "next": target}).headers["Location"] == "/"


@pytest.mark.parametrize("token", ["replace-with-a-long-random-token-0123456789", "short", "t" * 60])
def test_placeholder_and_weak_tokens_are_refused(token: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="dashboard token"):
        DashboardConfig(token=token)
    monkeypatch.setenv("LDPTEL_DASHBOARD_TOKEN", token)
    out, err = io.StringIO(), io.StringIO()
    assert main(["dashboard", "--redis-url", redis_url, "--port", "0"], stdout=out, stderr=err) == 2
    assert err.getvalue().startswith("ldptel: error: dashboard token:") and err.getvalue().count("\n") == 1


def test_token_from_env_falls_back_to_the_admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DashboardConfig.from_env({"LDPTEL_ADMIN_TOKEN": TOKEN}).token == TOKEN
    assert DashboardConfig.from_env({"LDPTEL_ADMIN_TOKEN": "a" + TOKEN, "LDPTEL_DASHBOARD_TOKEN": TOKEN}).token == TOKEN
    with pytest.raises(ConfigError, match="LDPTEL_DASHBOARD_TOKEN"):
        DashboardConfig.from_env({})


# the keys of one metric of GET /api/metrics (docs/json-output.md: dashboard-metrics), pinned like the CLI's documents
DASHBOARD_METRIC = {"name", "status", "version", "versions", "mechanism", "kind", "kind_by_version", "days_by_version",
                    "description", "shards", "epsilon", "effective_epsilon", "daily_epsilon", "reports_per_day",
                    "longitudinal", "above_default_policy", "candidates", "default_top", "estimators", "shape",
                    "breakdown", "reports_by_day", "lag"}  # fmt: skip


def test_metric_documents_are_versioned_and_keep_their_keys(dash: FlaskClient, data: Populated) -> None:
    doc = dash.get("/api/metrics", headers=bearer()).get_json()
    assert doc["schema_version"] == 1 and set(doc) == {"schema_version", "metrics"}
    for item in doc["metrics"]:
        assert DASHBOARD_METRIC <= set(item), sorted(DASHBOARD_METRIC - set(item))
        one = dash.get(f"/api/metrics/{item['name']}", headers=bearer()).get_json()
        assert one.pop("schema_version") == 1 and one == item


def test_metric_list_counts_reports_per_day_and_lag(dash: FlaskClient, redis: redis_lib.Redis, data: Populated) -> None:
    listed = {m["name"]: m for m in dash.get("/api/metrics", headers=bearer()).get_json()["metrics"]}
    assert sorted(listed) == ["dark_mode", "emoji", "platform"]
    for name, item in listed.items():
        want = cli_json("estimate", name, "--by-day", "--format", "json", *(["--candidate", "x"] if name == "emoji" else []))
        assert item["reports_by_day"] == [{"day": d["day"], "n": d["n"]} for d in want["daily"]]  # type: ignore[index]
        shown = cli_json("metrics", "show", name)
        assert item["effective_epsilon"] == shown["current"]["effective_epsilon"]  # type: ignore[index]
        assert item["lag"] == 0 and item["days_by_version"] == {"1": list(DAYS)}
    # appended but not folded yet: the lag counts the two entries
    append_reports(redis, registry.get_metric(redis, "dark_mode"), [True] * 10, np.random.default_rng(1), day=DAYS[-1], batch_size=5)
    assert dash.get("/api/metrics/dark_mode", headers=bearer()).get_json()["lag"] == 2


def test_day_reports_reads_n_without_the_counts(redis: redis_lib.Redis, data: Populated) -> None:
    rec = registry.get_metric(redis, "emoji")
    pairs = [(shard, v, day) for shard, members in store.sketch_index(redis, "emoji", rec.shards).items() for v, day in members]
    got = store.day_reports(redis, "emoji", params=rec.current.params, pairs=pairs)
    for day in DAYS:
        state, _ = store.sum_sketches(redis, "emoji", params=rec.current.params, pairs=[p for p in pairs if p[2] == day])
        assert got[day] == state.n
    assert got[DAYS[0]] in (1500, 1125)


QUERIES = [
    ("emoji", {"candidate": ["😂", "❤", "🔥"], "top": "2", "postprocess": "norm-sub", "from": DAYS[1]}),
    ("emoji", {"candidates": "😂\n# comment\n❤\n", "estimator": "both"}),
    ("dark_mode", {"confidence": "0.9", "day": DAYS[2]}),
    ("platform", {"candidate": ["ios", "web"], "postprocess": "clip", "version": "1"}),
]
CLI_FLAGS = {"from": "--from", "to": "--to", "day": "--day", "top": "--top", "postprocess": "--postprocess",
             "estimator": "--estimator", "confidence": "--confidence", "version": "--version"}


def _cli_args(params: dict[str, object]) -> list[str]:
    args: list[str] = []
    for key, value in params.items():
        if key == "candidate":
            args += [a for v in value for a in ("--candidate", v)]  # type: ignore[attr-defined]
        elif key == "candidates":
            args += [a for v in str(value).splitlines() if v and not v.startswith("#") for a in ("--candidate", v)]
        else:
            args += [CLI_FLAGS[key], str(value)]
    return args


@pytest.mark.parametrize(("name", "params"), QUERIES)
def test_every_chart_endpoint_returns_the_cli_document(dash: FlaskClient, name: str, params: dict[str, object]) -> None:
    query = urllib.parse.urlencode(params, doseq=True)
    for path, extra in ((f"/api/metrics/{name}/estimate", []), (f"/api/metrics/{name}/by-day", ["--by-day"])):
        want = cli_json("estimate", name, *_cli_args(params), *extra, "--format", "json")
        got = dash.get(f"{path}?{query}", headers=bearer())
        assert got.status_code == 200, got.get_data(as_text=True)
        assert got.get_json() == want
        posted = dash.post(path, json=params, headers=bearer())
        assert posted.get_json() == want


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/api/metrics/nope", 404, "unknown metric 'nope'"),
        ("/api/metrics/nope/estimate", 404, "unknown metric"),
        ("/api/metrics/emoji/estimate", 400, "candidates"),
        ("/api/metrics/emoji/estimate?candidate=x&version=9", 404, "no version 9"),
        ("/api/metrics/emoji/estimate?candidate=x&version=0", 400, "version must be an integer >= 1"),
        ("/api/metrics/emoji/estimate?candidate=x&top=two", 400, "top must be"),
        ("/api/metrics/emoji/estimate?candidate=x&from=2026-13-01", 400, "day"),
        ("/api/metrics/emoji/by-day?candidate=x&from=2027-01-01", 404, "no sketches of 'emoji'"),
        ("/api/metrics/emoji/estimate?candidate=x&estimator=best", 400, "estimator must be"),
        ("/api/metrics/emoji/estimate?candidate=x&confidence=1.5", 400, "confidence"),
        ("/api/metrics/emoji/estimate?candidate=x&confidence=abc", 400, "confidence"),
        ("/api/metrics/emoji/estimate?candidate=x&postprocess=round", 400, "postprocess"),
        ("/api/metrics/emoji/estimate?candidate=x&colour=red", 400, "parameter must be one of"),
        ("/api/metrics/dark_mode/estimate?estimator=corrected", 400, "estimator must be"),
        ("/api/nothing", 404, ""),
    ],
)
def test_bad_input_is_a_4xx_json_answer(dash: FlaskClient, path: str, status: int, needle: str) -> None:
    resp = dash.get(path, headers=bearer())
    assert resp.status_code == status, resp.get_data(as_text=True)
    body = resp.get_json()
    assert set(body) == {"error", "message"} and needle in body["message"]


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b'{"candidate": [1]}', b'{"candidate": "x", "from": 5}'])
def test_bad_post_bodies_are_400(dash: FlaskClient, body: bytes) -> None:
    resp = dash.post("/api/metrics/emoji/estimate", data=body, content_type="application/json", headers=bearer())
    assert resp.status_code == 400 and resp.get_json()["error"] == "bad_request"
    assert dash.delete("/api/metrics/emoji/estimate", headers=bearer()).status_code == 405


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.dictionaries(st.sampled_from(["from", "to", "day", "version", "candidate", "top", "confidence",
                                               "postprocess", "estimator", "percentiles", "keep", "alpha", "threshold",
                                               "x"]), st.text(max_size=12), max_size=4),
       name=st.sampled_from(["emoji", "dark_mode", "platform", "nope"]), path=st.sampled_from(["estimate", "by-day", "discover"]))
def test_no_query_string_gives_a_5xx(dash: FlaskClient, params: dict[str, str], name: str, path: str) -> None:
    resp = dash.get(f"/api/metrics/{name}/{path}?{urllib.parse.urlencode(params)}", headers=bearer())
    assert resp.status_code in (200, 400, 404), resp.get_data(as_text=True)
    assert resp.is_json


@pytest.fixture
def more(dash: FlaskClient, redis: redis_lib.Redis) -> FlaskClient:
    """The dashboard over numeric (``load_ms`` mean, ``load_hist`` num-histogram) and discovery (``typed``) metrics too."""
    snapshot(redis, ("populate", DAYS, 1500, "populate_more", 3000), lambda: populate_more(redis, days=DAYS, per_day=3000))
    return dash


NUMERIC_QUERIES = [
    ("load_ms", {}, []),
    ("load_ms", {"from": DAYS[1], "confidence": "0.9"}, []),
    ("load_hist", {"percentiles": "50,90,99", "postprocess": "norm-sub"}, ["--percentiles", "50,90,99"]),
    ("load_hist", {"percentiles": "25.5, 75", "day": DAYS[0]}, ["--percentiles", "25.5,75"]),
    ("typed", {"candidate": ["ok", "😀", "nope"]}, []),
]


@pytest.mark.parametrize(("name", "params", "flags"), NUMERIC_QUERIES)
def test_numeric_and_percentile_endpoints_return_the_cli_document(more: FlaskClient, name: str, params: dict[str, object],
                                                                   flags: list[str]) -> None:
    query = urllib.parse.urlencode(params, doseq=True)
    plain = {k: v for k, v in params.items() if k != "percentiles"}
    for path, extra in ((f"/api/metrics/{name}/estimate", []), (f"/api/metrics/{name}/by-day", ["--by-day"])):
        want = cli_json("estimate", name, *_cli_args(plain), *flags, *extra, "--format", "json")
        got = more.get(f"{path}?{query}", headers=bearer())
        assert got.status_code == 200, got.get_data(as_text=True)
        text = got.get_data(as_text=True)
        assert "NaN" not in text and got.get_json() == want  # strict JSON: a browser parses it
        if "percentiles" in params:
            posted = {**params, "percentiles": [float(v) for v in str(params["percentiles"]).split(",")]}
            assert more.post(path, json=posted, headers=bearer()).get_json() == want
    if name == "load_ms":  # numeric summaries: no shares of the reports
        rows = more.get(f"/api/metrics/{name}/estimate?{query}", headers=bearer()).get_json()["rows"]
        assert [r["value"] for r in rows] == ["mean", "sum", "count"] and all(r["frequency"] is None for r in rows)


@pytest.mark.parametrize(
    "params",
    [{}, {"top": "2", "from": DAYS[1]}, {"keep": "20", "alpha": "0.01", "confidence": "0.9"}, {"threshold": "6", "day": DAYS[0]}],
)
def test_discover_endpoint_returns_the_cli_document(more: FlaskClient, params: dict[str, str]) -> None:
    flags = {"top": "--top", "from": "--from", "day": "--day", "keep": "--keep", "alpha": "--alpha",
             "confidence": "--confidence", "threshold": "--threshold"}
    want = cli_json("discover", "typed", *[a for k, v in params.items() for a in (flags[k], v)], "--format", "json")
    got = more.get(f"/api/metrics/typed/discover?{urllib.parse.urlencode(params)}", headers=bearer())
    assert got.status_code == 200, got.get_data(as_text=True)
    assert got.get_json() == want
    assert want["rows"] and want["discovery"]["stages"]  # type: ignore[index]
    if not params:
        assert {"ok", "日本語", "😀", "héllo"} <= {r["value"] for r in want["rows"]}  # type: ignore[index]


def test_metric_summary_says_what_kind_of_page_to_draw(more: FlaskClient) -> None:
    listed = {m["name"]: m for m in more.get("/api/metrics", headers=bearer()).get_json()["metrics"]}
    kinds = {name: (m["kind"], m["kind_by_version"]["1"], m["candidates"], len(m["estimators"])) for name, m in listed.items()}
    assert kinds == {"emoji": ("frequencies", "frequencies", "required", 3), "dark_mode": ("frequencies", "frequencies", "none", 1),
                     "platform": ("frequencies", "frequencies", "labels", 1), "load_ms": ("summary", "summary", "none", 1),
                     "load_hist": ("histogram", "histogram", "none", 1), "typed": ("discovery", "discovery", "required", 3)}
    for name, m in listed.items():  # the page reads the kind, never a params field or a capability flag
        assert not {"needs_candidates", "discovers", "counts", "edges_by_version"} & set(m), name
    hist = cli_json("estimate", "load_hist", "--histogram", "--format", "json")
    assert hist["kind"] == "histogram"
    edges = hist["edges"]
    assert len(edges) == len(hist["rows"]) + 1 and edges[0] == 10 and edges[-1] == 10000  # type: ignore[index]


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("/api/metrics/load_hist/estimate?percentiles=50,abc", 400, "percentiles must be numbers in (0, 100)"),
        ("/api/metrics/load_hist/estimate?percentiles=0", 400, "percentiles"),
        ("/api/metrics/load_hist/estimate?percentiles=100.5", 400, "percentiles"),
        ("/api/metrics/load_ms/estimate?percentiles=50", 400, "numeric histogram"),
        ("/api/metrics/load_ms/estimate?postprocess=norm-sub", 400, "postprocess"),
        ("/api/metrics/emoji/discover", 400, "a metric whose mechanism discovers values"),
        ("/api/metrics/nope/discover", 404, "unknown metric"),
        ("/api/metrics/typed/discover?keep=0", 400, "keep must be an integer >= 1"),
        ("/api/metrics/typed/discover?alpha=2", 400, "alpha"),
        ("/api/metrics/typed/discover?threshold=x", 400, "threshold"),
        ("/api/metrics/typed/discover?candidate=ok", 400, "parameter must be one of"),
        ("/api/metrics/typed/discover?from=2027-01-01", 404, "no sketches of 'typed'"),
        ("/api/metrics/typed/estimate", 400, "candidates"),
    ],
)
def test_bad_numeric_and_discovery_input_is_a_4xx_json_answer(more: FlaskClient, path: str, status: int, needle: str) -> None:
    resp = more.get(path, headers=bearer())
    assert resp.status_code == status, resp.get_data(as_text=True)
    body = resp.get_json()
    assert set(body) == {"error", "message"} and needle in body["message"], body


def test_served_over_http_without_logging_addresses(data: Populated, redis_url: str) -> None:
    log: list[str] = []
    with running_dashboard(redis_url, TOKEN, log=log) as base:
        assert base.startswith("http://127.0.0.1:")  # loopback unless --host says otherwise
        with urllib.request.urlopen(urllib.request.Request(f"{base}/api/metrics", headers=bearer())) as resp:
            doc = json.loads(resp.read())
            assert doc["schema_version"] == 1 and [m["name"] for m in doc["metrics"]] == ["dark_mode", "emoji", "platform"]
        try:
            urllib.request.urlopen(f"{base}/api/metrics").close()
        except urllib.error.HTTPError as denied:
            with denied:
                assert denied.code == 401
        else:
            raise AssertionError("no token, yet not refused")
    assert "GET /api/metrics" in log[0] and "127.0.0.1" not in log[0], log[0]


def test_dashboard_command_help_and_unreachable_redis(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--help"]) == 0
    assert "LDPTEL_DASHBOARD_TOKEN" in capsys.readouterr().out
    monkeypatch.setenv("LDPTEL_DASHBOARD_TOKEN", TOKEN)
    out, err = io.StringIO(), io.StringIO()
    assert main(["dashboard", "--redis-url", "redis://127.0.0.1:1/0", "--port", "0"], stdout=out, stderr=err) == 2
    assert err.getvalue().startswith("ldptel: error: cannot reach Redis") and err.getvalue().count("\n") == 1


def test_a_taken_port_is_one_line(redis_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    import socket

    monkeypatch.setenv("LDPTEL_DASHBOARD_TOKEN", TOKEN)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out, err = io.StringIO(), io.StringIO()
        assert main(["dashboard", "--redis-url", redis_url, "--port", str(port)], stdout=out, stderr=err) == 2
    assert err.getvalue().startswith(f"ldptel: error: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert err.getvalue().count("\n") == 1
    assert capfd.readouterr().err == ""  # nothing printed around it


def test_templates_and_static_files_ship_and_the_readme_screenshot_is_there() -> None:
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folder = root / "aggregator" / "dashboard"
    for sub in ("templates", "static"):
        globs = data[f"ldptel.aggregator.dashboard.{sub}"]
        files = [p.name for p in (folder / sub).iterdir()]
        assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)
    assert "](docs/dashboard.png)" in (root / "README.md").read_text(encoding="utf-8")
    assert (root / "docs" / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
