"""A new mechanism is one module and one registry entry (issue 25): a copy of ``histogram.py`` under a new name
and wire code, in a temporary package outside ldptel, registered at run time, goes through create, report (ingest
over HTTP), fold (the worker), estimate (library and CLI), the dashboard's API and plan, with no other edit.

What the copy changes is its name and code, nothing else: every consumer reaches it through the registry and its
capability types (it is ``Bucketed``, so its kind is ``histogram``), never through its module.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.dashboard.app import EXTENSION, create_dashboard
from ldptel.aggregator.dashboard.config import DashboardConfig
from ldptel.aggregator.plan import plan
from ldptel.aggregator.query import HistogramResult, estimate_metric
from ldptel.client import bucket_edges
from ldptel.client.mechanisms import registry
from ldptel.client.mechanisms.capabilities import Bucketed
from ldptel.storage import registry as metrics
from tests.aggregator.agg_helpers import drain, post_reports, run_cli

SOURCE = Path(__file__).resolve().parents[1] / "client" / "mechanisms" / "histogram.py"
NAME, CODE = "num-histogram-copy", 209
TOKEN = "dash-token-for-the-new-kind"


@pytest.fixture
def copied(tmp_path: Path) -> Iterator[ModuleType]:
    """``histogram.py`` copied into a package of its own, its name and code changed, imported and registered."""
    text = SOURCE.read_text(encoding="utf-8")
    assert text.count('"num-histogram"') == 3 and text.count("    code = 9\n") == 1  # its name (params, batch, mechanism)
    text = text.replace('"num-histogram"', f'"{NAME}"').replace("    code = 9\n", f"    code = {CODE}\n")
    pkg = tmp_path / "ldptel_plugin_kind"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "histcopy.py").write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("ldptel_plugin_kind.histcopy", pkg / "histcopy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    registry.register(module.HISTOGRAM)
    try:
        yield module
    finally:
        registry.unregister(NAME)
        sys.modules.pop(spec.name, None)


def test_a_copied_histogram_module_works_end_to_end(
    copied: ModuleType, redis: redis_lib.Redis, redis_url: str, client: FlaskClient, app_token: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mech = registry.get_mechanism(NAME)
    assert isinstance(mech, Bucketed) and mech.kind == "histogram" and type(mech).__module__ == "ldptel_plugin_kind.histcopy"
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)

    # create: through the CLI, whose --mechanism choices and params come from the registry
    code, out, err = run_cli("metrics", "create", "copied", "--mechanism", NAME, "--epsilon", "4", "--range", "0", "100",
                             "--buckets", "8")
    assert code == 0, err
    record = metrics.get_metric(redis, "copied")
    params = record.current.params
    assert isinstance(params, copied.HistogramParams) and params.edges == bucket_edges(0, 100, 8)

    # report: privatized on the "device", posted to the real ingest app; fold: the worker
    rng = np.random.default_rng(2509)
    values = np.clip(rng.normal(40, 15, 20_000), 0, 100)
    sent = post_reports(client, app_token, record, values.tolist(), rng, batch_size=5000)
    drain(redis)

    # estimate: the library gives the histogram kind's result, equal to folding the sent batches locally
    res = estimate_metric(redis, "copied", percentiles=[50])
    assert isinstance(res, HistogramResult) and res.n == sent.n == 20_000
    want = mech.estimate(params, sent.expected_state())
    np.testing.assert_allclose(res.estimate.counts, want.counts)
    assert res.mean is not None and abs(res.mean.estimate - float(values.mean())) < 6 * res.mean.stderr + 100 / 16
    doc = json.loads(run_cli("estimate", "copied", "--histogram", "--format", "json")[1])
    assert doc["kind"] == "histogram" and doc["mechanism"] == NAME and len(doc["edges"]) == 9
    code, table, err = run_cli("estimate", "copied")  # the histogram's summary view: count, mean, sum, percentiles
    assert code == 0 and "p50" in table and "mean" in table, err

    # dashboard: its API says the kind; the estimate document is the CLI's
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url))
    try:
        dash = app.test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        info = dash.get("/api/metrics/copied", headers=auth).get_json()
        assert (info["mechanism"], info["kind"], info["candidates"]) == (NAME, "histogram", "none")
        got = dash.get("/api/metrics/copied/estimate", headers=auth)
        assert got.status_code == 200 and got.get_json()["kind"] == "histogram"
        assert dash.get("/api/metrics/copied/by-day", headers=auth).get_json()["kind"] == "histogram"
    finally:
        app.extensions[EXTENSION][1].close()  # the app's Redis client: left to the cyclic GC it failed a later test

    # plan: the copy is planned like any registered mechanism over a domain of its buckets' size
    result = plan(domain_size=8, reports=20_000, error=0.05)
    assert result.rows and all(row.heavy_error > 0 for row in result.rows)
    planned = {row.mechanism for row in result.rows}
    assert (NAME in planned) == ("num-histogram" in planned)  # the copy is planned exactly as its original
    code, out, err = run_cli("plan", "--domain-size", "8", "--reports", "20000", "--error", "0.05")
    assert code == 0, err
    code, out, err = run_cli("plan", "--range", "0", "100", "--reports", "20000", "--error", "0.01")
    assert code == 0, err


def test_register_refuses_a_taken_name_or_code(copied: ModuleType) -> None:
    with pytest.raises(Exception, match="new name and wire code"):
        registry.register(copied.HISTOGRAM)
    with pytest.raises(Exception, match="register"):
        registry.unregister("num-histogram")
