"""Exactly once across a SIGKILL: the app dies after the server counted a batch but before it heard the 202."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from tests.client.conftest import LiveServer

CHILD = textwrap.dedent(
    """
    import json, sys
    from ldptel.client.sdk.policy import PrivacyPolicy
    from ldptel.client.sdk.reporter import Reporter

    policy = PrivacyPolicy(max_daily_epsilon=float("inf"))  # 200 reports in one day

    mode, url, token, storage, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    if mode == "fill":
        rep = Reporter(url, token, storage, start=False, batch_size=50, metrics=["crash.metric"], policy=policy)
        assert rep.wait_for_specs(30)
        for i in range(n):
            assert rep.report("crash.metric", f"value-{i % 17}").queued
        print("queued", flush=True)
        rep.flush(timeout=60)  # the first POST is held by the proxy; the parent kills us meanwhile
        print("flush returned", flush=True)
    else:
        with Reporter(url, token, storage, batch_size=50, flush_interval=3600, policy=policy) as rep:
            ok = rep.flush(timeout=30)
            st = rep.stats()
        print(json.dumps({"ok": ok, "delivered": st.delivered, "pending": st.pending}), flush=True)
    """
)


def test_reports_arrive_exactly_once_after_sigkill_mid_upload(live: LiveServer, proxy, app_token, tmp_path, redis) -> None:
    url, ctl = proxy
    from ldptel.client import CmsParams, MetricSpec

    live.create(MetricSpec(name="crash.metric", params=CmsParams(epsilon=4.0, k=16, m=1024), reports_per_day=1000))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    storage = tmp_path / "device"
    n = 200

    ctl.hold_next_post = True
    child = subprocess.Popen(
        [sys.executable, str(script), "fill", url, app_token, str(storage), str(n)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "queued"
        assert ctl.held.wait(30), "the first upload never reached the server"
        os.kill(child.pid, signal.SIGKILL)  # mid-upload: the server has counted batch 1, the app never hears it
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ctl.release.set()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    first = live.delivered("crash.metric")
    assert first["total"] == 50 and first["entries"] == 1

    out = subprocess.run(
        [sys.executable, str(script), "deliver", url, app_token, str(storage), str(n)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"ok": True, "delivered": n, "pending": 0}

    got = live.delivered("crash.metric")
    assert got["total"] == n and got["entries"] == 4  # every report once: 4 batches of 50
    assert len(set(got["batch_ids"])) == 4
    posts = ctl.posts()
    held_id = posts[0].batch_id
    assert [p.batch_id for p in posts].count(held_id) == 2  # the retry reused the stored batch id ...
    retry = [p for p in posts[1:] if p.batch_id == held_id][0]
    assert json.loads(retry.body)["duplicate"] is True  # ... and the server acknowledged it without recounting
