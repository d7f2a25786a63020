"""Discovery end to end: reports of a pem metric through the real ingest app (or the server's appender for
chosen days), the real Redis, the fold worker and ``ldptel discover`` (library and CLI, every format)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib
from flask.testing import FlaskClient

from ldptel.aggregator.cli import RESULT_COLUMNS, main
from ldptel.aggregator.discover import discover_metric
from ldptel.aggregator.query import EmptyRangeError, estimate_metric
from ldptel.aggregator.render import PRIVACY_COLUMNS
from ldptel.client import CmsParams, MetricSpec, PemParams
from ldptel.client.errors import InvalidParameterError
from ldptel.client.mechanisms import get_mechanism
from ldptel.storage import sketches as store
from tests.aggregator.agg_helpers import append_reports, create, drain, post_reports, run_cli

HEAVY = {"ok": 2500, "日本語": 1800, "😀": 1500, "héllo": 1200}
PARAMS = PemParams(epsilon=4.0, k=32, m=256, max_bytes=9, hash_seed=4)


def _population(rng: np.random.Generator) -> list[str]:
    values = [w for w, c in HEAVY.items() for _ in range(c)]
    values += [f"r{i:05d}" for i in rng.integers(0, 99_999, 3000)]  # rare values: a few devices each at most
    order = rng.permutation(len(values))
    return [values[i] for i in order]


@pytest.fixture
def words(redis: redis_lib.Redis, env_url: str, rng: np.random.Generator) -> list[str]:
    record = create(redis, MetricSpec(name="words", params=PARAMS), shards=2)
    values = _population(rng)
    append_reports(redis, record, values[:6000], rng, day="2026-03-01", batch_size=700)
    append_reports(redis, record, values[6000:], rng, day="2026-03-02", batch_size=700)
    drain(redis)
    return values


@pytest.mark.slow
def test_ingest_fold_and_discover_end_to_end(redis: redis_lib.Redis, client: FlaskClient, token: str, rng: np.random.Generator) -> None:
    """Through POST /v1/reports (the real app), the stream, the fold worker and the sketch store: the state
    the worker stored equals the local fold exactly, and discovery from it finds every heavy value."""
    record = create(redis, MetricSpec(name="typed", params=PARAMS), shards=2)
    sent = post_reports(client, token, record, _population(rng), rng, batch_size=500)
    stats = drain(redis)
    assert stats.reports == sent.n and stats.dead == 0
    index = store.sketch_index(redis, "typed", record.shards)
    pairs = [(shard, v, day) for shard, members in index.items() for v, day in members]
    state, _ = store.sum_sketches(redis, "typed", params=PARAMS, pairs=pairs)
    assert state.equals(sent.expected_state())
    found = discover_metric(redis, "typed")
    assert found.result.n == sent.n
    assert set(HEAVY) <= set(found.result.labels)
    direct = get_mechanism("pem").discover(PARAMS, sent.expected_state())
    assert direct.estimate.labels == found.discovery.estimate.labels
    np.testing.assert_array_equal(direct.estimate.counts, found.discovery.estimate.counts)
    # The heavy values' intervals from the full-value sketch: each within 6 stderr of the truth.
    for label, est, se in zip(found.result.labels, found.result.estimate.counts, found.result.estimate.stderr, strict=True):
        if label in HEAVY:
            assert abs(est - HEAVY[label]) <= 6 * se, (label, est, se)
    # The same metric answers listed values too (ldptel estimate --candidates), from the same sketches.
    listed = estimate_metric(redis, "typed", candidates=list(HEAVY))
    assert listed.labels == tuple(HEAVY) and listed.n == sent.n
    with pytest.raises(InvalidParameterError, match="sketch mechanism") as info:  # no collision-corrected fit
        estimate_metric(redis, "typed", candidates=list(HEAVY), estimator="corrected")
    assert "pem" not in str(info.value)


@pytest.mark.slow
def test_cli_formats_stages_and_progress(words: list[str], tmp_path: Path) -> None:
    code, out, err = run_cli("discover", "words", "--top", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("words v1 (pem, ε = 3.968 per report)") and "n = 10,000 reports" in lines[0]  # quantized
    assert [line.split()[0] for line in lines[3:6]] == list(HEAVY)[:3]  # ranked by estimate
    assert "candidates examined" in out and "prefix bytes" in out
    assert err.splitlines()[-1] == "ldptel discover: round 9/9" and err.count("\n") == 9

    code, out, _ = run_cli("discover", "words", "--format", "json", "--keep", "20")
    doc = json.loads(out)
    assert [row["value"] for row in doc["rows"]][:4] == list(HEAVY)
    assert 3.9 < doc["local_epsilon"] <= 4.0 and not doc["central"]["applicable"]  # the quantized ε; no shuffle here
    disc = doc["discovery"]
    assert disc["keep"] == 20 and len(disc["stages"]) == 9 and disc["alpha"] == 0.05
    assert disc["stages"][0]["examined"] == 255 and disc["stages"][1]["examined"] == 255 * 20
    assert disc["tested"] == sum(s["tested"] for s in disc["stages"]) <= disc["test_bound"]
    assert all(row["estimate"] >= disc["threshold_stderr"] * row["stderr"] for row in doc["rows"])

    code, out, _ = run_cli("discover", "words", "--format", "csv", "--threshold", "50")
    rows = list(csv.DictReader(io.StringIO(out)))
    header = (*RESULT_COLUMNS, *PRIVACY_COLUMNS)
    assert tuple(rows[0]) == header if rows else out.strip() == ",".join(header)
    assert all(float(r["estimate"]) >= 50 * float(r["stderr"]) for r in rows)

    code, out, _ = run_cli("discover", "words", "--day", "2026-03-02", "--format", "json")
    assert json.loads(out)["n"] == 4000 and json.loads(out)["days"] == ["2026-03-02"]

    if importlib.util.find_spec("matplotlib") is not None:
        png = tmp_path / "found.png"
        assert run_cli("discover", "words", "--plot", str(png))[0] == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("discover", "nope"), "unknown metric 'nope'"),
        (("discover", "pages"), "discovers values"),
        (("discover", "words", "--from", "2027-01-01"), "no sketches of 'words'"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(redis: redis_lib.Redis, words: list[str], argv: tuple[str, ...], message: str) -> None:
    create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=1)
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_library_errors(redis: redis_lib.Redis) -> None:
    create(redis, MetricSpec(name="empty", params=PARAMS), shards=1)
    with pytest.raises(EmptyRangeError):
        discover_metric(redis, "empty")
    with pytest.raises(InvalidParameterError, match="top"):
        discover_metric(redis, "empty", top=0)


def test_help_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--help"]) == 0
    assert "Bonferroni" in capsys.readouterr().out
    assert main(["discover", "words", "--alpha", "2"]) == 2
    assert "expected a number in (0, 1)" in capsys.readouterr().err


def test_metrics_create_takes_max_bytes(redis: redis_lib.Redis, env_url: str) -> None:
    code, out, err = run_cli("metrics", "create", "typed2", "--mechanism", "pem", "--epsilon", "4", "--k", "8", "--m", "64",
                         "--max-bytes", "6")
    assert code == 0, err
    assert "k=8 m=64 L=6" in out
    code, _, err = run_cli("metrics", "create", "typed3", "--mechanism", "pem", "--epsilon", "4", "--k", "8", "--m", "64")
    assert code == 2 and "max_bytes" in err


def test_json_of_a_metric_without_data_is_a_valid_empty_document(redis: redis_lib.Redis, env_url: str) -> None:
    """Like ``estimate``: a script reading ``--format json`` gets a document with no rows, not an empty output."""
    create(redis, MetricSpec(name="quiet", params=PARAMS), shards=1)
    code, out, err = run_cli("discover", "quiet", "--format", "json")
    assert code == 0 and "no folded reports yet" in err
    doc = json.loads(out)
    assert doc["rows"] == [] and (doc["metric"], doc["version"]) == ("quiet", 1)
