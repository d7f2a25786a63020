"""JSON output is an API (issue 31 §3; docs/json-output.md): every ``--format json`` document of the CLI carries
``schema_version`` and at least the keys pinned here. A change that drops or renames a pinned key fails this
test (naming the document and the key): bump that document's version in ``ldptel.aggregator.json_api`` and its
section of docs/json-output.md instead. Adding keys is allowed within a version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.json_api import SCHEMA_VERSIONS
from ldptel.client import MetricSpec
from ldptel.client.protocol.specs import params_from_dict
from ldptel.storage import registry
from tests.aggregator.agg_helpers import append_reports, drain, run_cli

ROOT = Path(__file__).resolve().parents[2]
DAY = "2026-03-01"
RESULT = {"schema_version", "metric", "version", "mechanism", "kind", "days", "shards", "n", "confidence", "postprocess",
          "estimator", "rows", "uncertainty", "uncertainty_meaning"}  # fmt: skip
PRIVACY = {"local_epsilon", "central"}  # docs/central-privacy.md
METRIC = {"schema_version", "name", "status", "current_version", "shards", "current", "versions"}
ANSWER = {"question", "reachable", "recommendation", "alternative", "mechanism", "params", "epsilon", "effective_epsilon",
          "odds_bound", "central_epsilon", "central_delta", "target", "error", "error_one_day", "unit", "reports_needed", "days",
          "reports_per_day", "reports", "confidence", "assumptions", "warnings"}  # fmt: skip

# document → (the schema_version it is pinned at, the keys it must keep)
PINNED: dict[str, tuple[int, set[str]]] = {
    "estimate (frequencies)": (1, RESULT | PRIVACY),
    "estimate (summary)": (1, RESULT | PRIVACY),
    "estimate (histogram)": (1, RESULT | PRIVACY | {"percentiles", "mean", "edges"}),
    "estimate --by-day": (1, RESULT | {"central", "by_day", "daily"}),
    "discover": (1, RESULT | PRIVACY | {"discovery"}),
    "metrics show": (1, METRIC),
    "metrics create": (1, METRIC),
    "metrics grow": (1, METRIC),
    "metrics list": (1, {"schema_version", "metrics"}),
    "metrics list[0]": (0, METRIC - {"schema_version"} | {"expired", "above_default_policy"}),
    "metrics plan": (1, {"schema_version", "applied", "metrics", "not_in_file"}),
    "status": (1, {"schema_version", "shards"}),
    "metrics profile": (1, {"schema_version", "dimensions", "implicit"}),
    "status.shards[0]": (0, {"metric", "shard", "length", "lag", "checkpoint", "owner", "lease_ms"}),
    "aggregate --once": (1, {"schema_version", "commits", "dead", "elapsed", "entries", "lag", "reports", "shards",
                             "unclaimed"}),
    "seal": (1, {"schema_version", "metric", "days_sealed", "dropped", "late_states", "rollups_built", "seconds",
                 "shard_states_merged", "skipped", "states_dropped", "through"}),
    "test": (1, {"schema_version", "metric", "uncertainty", "uncertainty_meaning", "groups", "tests"}),
    "plan --share": (1, {"schema_version", "answer", "rows", "request", "target", "n", "z", "model", "recommended"}),
    "plan --top-k": (1, {"schema_version", "answer", "rows", "request", "target", "n", "z", "model", "recommended"}),
    "plan --range": (1, {"schema_version", "answer", "rows", "lo", "hi", "n", "error", "typical"}),
    "plan --percentile": (1, {"schema_version", "answer", "rows"}),
    "plan --discover": (1, {"schema_version", "answer", "rows"}),
}


def _json(*argv: str) -> Any:
    code, out, err = run_cli(*argv)
    assert code == 0, (argv, err)
    return json.loads(out.splitlines()[0] if argv[0] in ("aggregate", "seal") else out)


@pytest.fixture
def documents(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator, tmp_path: Path) -> dict[str, Any]:
    """One of every JSON document the CLI prints, over small real metrics in a real Redis."""
    docs: dict[str, Any] = {}
    docs["metrics create"] = _json("metrics", "create", "pages", "--mechanism", "cms", "--epsilon", "4", "--k", "16",
                                   "--m", "256", "--shards", "1", "--format", "json")
    for name, params in (("time", {"mechanism": "mean", "epsilon": 4.0, "lo": 0.0, "hi": 100.0}),
                         ("lat", {"mechanism": "num-histogram", "epsilon": 4.0, "edges": [0.0, 10.0, 20.0, 40.0]}),
                         ("words", {"mechanism": "pem", "epsilon": 4.0, "k": 8, "m": 256, "max_bytes": 2})):
        registry.register_metric(redis, MetricSpec(name=name, params=params_from_dict(params)), shards=1)
    values: dict[str, list[Any]] = {"pages": [f"/p/{i % 5}" for i in range(2000)], "time": list(rng.uniform(0, 100, 2000)),
                                    "lat": list(rng.uniform(0, 40, 2000)), "words": ["ok"] * 1500 + ["no"] * 500}
    for name, vals in values.items():
        append_reports(redis, registry.get_metric(redis, name), vals, rng, day=DAY, batch_size=500)
    docs["aggregate --once"] = _json("aggregate", "--once")
    drain(redis)
    docs["estimate (frequencies)"] = _json("estimate", "pages", "--candidate", "/p/1", "--from", DAY, "--to", DAY, "--format", "json")
    docs["estimate (summary)"] = _json("estimate", "time", "--from", DAY, "--to", DAY, "--format", "json")
    docs["estimate (histogram)"] = _json("estimate", "lat", "--from", DAY, "--to", DAY, "--format", "json")
    docs["estimate --by-day"] = _json("estimate", "pages", "--candidate", "/p/1", "--from", DAY, "--to", DAY, "--by-day", "--format", "json")
    docs["discover"] = _json("discover", "words", "--from", DAY, "--to", DAY, "--format", "json")
    docs["test"] = _json("test", "pages", "--value", "/p/1", "--day", DAY, "--above", "0.1", "--format", "json")
    docs["seal"] = _json("seal", "--metric", "pages")
    docs["metrics show"] = _json("metrics", "show", "pages")
    docs["metrics grow"] = _json("metrics", "grow", "pages", "--shards", "2", "--format", "json")
    docs["metrics list"] = _json("metrics", "list", "--format", "json")
    docs["metrics list[0]"] = docs["metrics list"]["metrics"][0]
    toml = tmp_path / "m.toml"
    toml.write_text('[metrics.flag]\nmechanism = "rr"\nepsilon = 1\n')
    docs["metrics plan"] = _json("metrics", "plan", str(toml), "--format", "json")
    docs["status"] = _json("status", "--format", "json")
    docs["metrics profile"] = _json("metrics", "profile", "--format", "json")
    docs["status.shards[0]"] = docs["status"]["shards"][0]
    for question, argv in (("share", ["--share", "--error", "1pp"]), ("top-k", ["--top-k", "20", "--error", "1pp"]),
                           ("range", ["--range", "0", "600", "--error", "1%"]),
                           ("percentile", ["--percentile", "95", "--range", "0", "600", "--error", "1pp"]),
                           ("discover", ["--discover", "--min-share", "5%", "--epsilon", "4"])):
        docs[f"plan --{question}"] = _json("plan", "--daily-users", "50000", *argv, "--format", "json")
    return docs


def test_every_json_document_keeps_its_version_and_keys(documents: dict[str, Any]) -> None:
    assert set(documents) == set(PINNED)
    for name, (version, keys) in PINNED.items():
        doc = documents[name]
        assert isinstance(doc, dict), f"{name}: a JSON object (lists are wrapped from schema_version 1)"
        missing = keys - set(doc)
        assert not missing, f"{name}: dropped {sorted(missing)} — bump its schema_version (json_api.SCHEMA_VERSIONS, docs/json-output.md)"
        if version:
            assert doc["schema_version"] == version, f"{name}: schema_version {doc['schema_version']} but pinned at {version}"
    for name in ("plan --share", "plan --top-k", "plan --range", "plan --percentile", "plan --discover"):
        assert ANSWER <= set(documents[name]["answer"]), name


def test_the_doc_lists_every_versioned_document() -> None:
    text = (ROOT / "docs" / "json-output.md").read_text(encoding="utf-8")
    for document, version in SCHEMA_VERSIONS.items():
        assert f"`{document}` (schema_version {version})" in text, document
