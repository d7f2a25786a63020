"""The TypeScript SDK (client/js) inside the Python suite: its own tests, and the two-way protocol checks.

* ``npm test`` (after ``npm ci`` from the lockfile): ``tsc --strict``, the lint (no Math.random), and the TS
  tests, among them the golden vectors that :mod:`scripts.js_golden_vectors` generates here from the Python
  protocol (hashes of >= 10,000 strings, params, keyed streams, full batches), reproduced byte for byte.
* The other direction: batches the TS SDK privatized with the real CSPRNG are decoded, folded and estimated
  by the Python aggregator code, and every estimate covers the truth within z = 6 standard errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldptel.client.mechanisms import estimate, fold
from ldptel.client.protocol.specs import params_from_dict
from ldptel.client.protocol.wire import decode_batch, is_upload, split_upload
from tests.js_sdk import JS, ROOT, build, run_script
from tests.stats import assert_close_normal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ts_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("js")
    golden = tmp / "golden.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "js_golden_vectors.py"), str(golden)], check=True, timeout=300)
    ts_out = tmp / "ts_out.json"
    # npm test's pretest (tsc, then the lint) as separate steps: the build is shared with tests/e2e/test_js_e2e.py
    # (once per worker), the lint's and the tests' output are both checked below.
    build()
    lint = run_script("lint")
    res = run_script("test", env={"LDPTEL_GOLDEN": str(golden), "LDPTEL_TS_OUT": str(ts_out)})
    return subprocess.CompletedProcess(res.args, res.returncode or lint.returncode, lint.stdout + res.stdout,
                                       lint.stderr + res.stderr), ts_out


def test_typescript_suite(ts_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """tsc --strict, the lint and every TS test pass (the closing lines of node:test are shown)."""
    res, _ = ts_run
    tail = "\n".join((res.stdout + res.stderr).splitlines()[-60:])
    print(tail)
    assert res.returncode == 0, f"npm test failed in {JS}:\n{tail}"
    assert "# fail 0" in res.stdout, tail


def _truth_counts(values: list[Any], labels: list[Any]) -> np.ndarray:
    return np.array([sum(1 for v in values if v == label) for label in labels], dtype=np.float64)


def test_python_decodes_and_folds_ts_batches(ts_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    res, path = ts_run
    assert path.exists(), f"the TS suite wrote no batches:\n{res.stdout[-3000:]}"
    doc = json.loads(path.read_text())
    seen = set()
    for case in doc["cases"]:
        params = params_from_dict(case["params"])
        seen.add(params.mechanism)
        batches = []
        for body in case["batches"]:
            header, batch = decode_batch(bytes.fromhex(body), params)
            assert header.metric == case["metric"] and header.version == 1
            batches.append(batch)
        state = fold(params, batches)
        values = case["values"]
        n = len(values)
        assert state.n == n
        mech = params.mechanism
        what = f"{case['metric']} ({mech})"
        if mech in ("rr", "grr"):
            labels = [False, True] if mech == "rr" else list(params.domain)
            est = estimate(params, state)
            truth = _truth_counts(values, labels)
            for i in range(len(labels)):
                assert_close_normal(float(est.counts[i]), truth[i], float(est.stderr[i]), n=n, what=f"{what} {labels[i]}")
        elif mech in ("cms", "oue-cms", "hcms", "pem"):
            cands = ["apple", "🍌 banana", "hello"] if mech != "pem" else ["hello"]
            est = estimate(params, state, candidates=cands)
            truth = _truth_counts(values, cands)
            for i, c in enumerate(cands):
                assert_close_normal(float(est.counts[i]), truth[i], float(est.stderr[i]), n=n, what=f"{what} {c}")
        elif mech in ("mean", "daily-mean"):
            est = estimate(params, state)
            lo, hi = params.lo, params.hi
            truth_mean = float(np.mean(np.clip(values, lo, hi)))
            assert_close_normal(float(est.counts[0]), truth_mean, float(est.stderr[0]), n=n, what=f"{what} mean")
        elif mech == "num-histogram":
            est = estimate(params, state)
            buckets = params.buckets_of(np.asarray(values, dtype=np.float64))
            truth = np.bincount(buckets, minlength=params.d).astype(np.float64)
            for i in range(params.d):
                assert_close_normal(float(est.counts[i]), truth[i], float(est.stderr[i]), n=n, what=f"{what} bucket {i}")
        else:
            raise AssertionError(mech)
    assert seen == {"rr", "grr", "cms", "oue-cms", "hcms", "mean", "num-histogram", "daily-mean", "pem"}
    upload = bytes.fromhex(doc["upload"])
    assert is_upload(upload) and len(split_upload(upload)) == 5
