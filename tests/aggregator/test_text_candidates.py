"""Candidates that are not valid Unicode text (issue 22 §5): a clear error naming the candidate, from the library,
the CLI (``--candidate``, a candidates file, standard input) and the dashboard's API; never an encoder's exception.
The rule: ``ldptel.client.protocol.validate.lone_surrogate_at``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

from ldptel.aggregator.dashboard import DashboardConfig, create_dashboard
from ldptel.aggregator.dashboard.app import EXTENSION
from ldptel.aggregator.query import estimate_metric
from ldptel.client import CmsParams, InvalidTextError, MetricSpec
from tests.aggregator.agg_helpers import append_reports, create, drain, run_cli

TOKEN = "text-0123456789abcdef-ABCDEFGHIJ-xyz"
VALUES = ["/p/0", "/p/1", "/p/\U0001f600"]


@pytest.fixture
def pages(redis: redis_lib.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    record = create(redis, MetricSpec(name="pages", params=CmsParams(epsilon=4.0, k=16, m=256)), shards=1)
    append_reports(redis, record, [VALUES[i % 3] for i in range(600)], rng, day="2026-03-01", batch_size=300)
    drain(redis)


def test_the_library_names_the_candidate(redis: redis_lib.Redis, pages: None) -> None:
    with pytest.raises(InvalidTextError, match="value 2 of 3: .*lone surrogate"):
        estimate_metric(redis, "pages", candidates=["/p/0", "a\ud800b", "/p/1"])
    assert len(estimate_metric(redis, "pages", candidates=VALUES).rows()) == 3  # supplementary characters are fine


def test_the_cli_names_the_argument_or_the_line(pages: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An argv byte that is not UTF-8 arrives as a surrogate escape (PEP 383): "\udced" is the byte 0xED.
    code, out, err = run_cli("estimate", "pages", "--candidate", "/p/0", "--candidate", "bad\udced")
    assert code == 2 and out == ""
    assert "--candidate, value 2: a lone surrogate code point (U+D800-U+DFFF) at character 4" in err
    assert "Traceback" not in err and "UnicodeEncodeError" not in err

    cand = tmp_path / "candidates.txt"
    cand.write_bytes(b"\xef\xbb\xbf/p/0\n# a comment\nbad \xed\xa0\x80 surrogate\n/p/1\n")  # CESU-8 of U+D800 on line 3
    code, out, err = run_cli("estimate", "pages", "--candidates", str(cand))
    assert code == 2 and f"candidates file {cand}, line 3: not valid UTF-8" in err and "at byte 5" in err

    monkeypatch.setattr(sys, "stdin", io.StringIO("/p/0\n\n/p/1\nx\ud800\n"))  # a text stream (no .buffer)
    code, out, err = run_cli("estimate", "pages", "--candidates", "-")
    assert code == 2 and "candidates file -, line 4: a lone surrogate code point" in err, err

    ok = tmp_path / "ok.txt"
    ok.write_text("\n".join(VALUES), encoding="utf-8")
    code, out, err = run_cli("estimate", "pages", "--candidates", str(ok), "--format", "json")
    assert code == 0, err


def test_the_dashboard_answers_400_naming_the_candidate(pages: None, redis_url: str) -> None:
    app = create_dashboard(DashboardConfig(token=TOKEN, redis_url=redis_url))
    client = app.test_client()
    try:
        # JSON may carry a lone surrogate as an escape: "\ud800"
        body = '{"candidate": ["/p/0", "/p/1", "x\\ud800"]}'
        resp = client.post("/api/metrics/pages/estimate", data=body, content_type="application/json",
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status_code == 400, resp.get_data()
        document = resp.get_json()
        assert document["error"] == "bad_request" and "value 3 of 3" in document["message"]
        assert "lone surrogate" in document["message"]
    finally:
        app.extensions[EXTENSION][1].close()
