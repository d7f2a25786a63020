"""``ldptel demo`` end to end: the real console script in a subprocess, real Redis, gunicorn, worker, Reporters.

Every process the demo starts inherits the environment, so each run carries a unique marker variable; after
the demo exits, no process on the machine may still carry it (and the pids it printed must be gone).
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ldptel.aggregator import demo
from tests.wait import wait_until

pytestmark = pytest.mark.slow

MARKER = "DEMO_E2E_MARKER"  # the demo strips LDPTEL_* from what it passes on; this name it keeps
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def demo_command(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "ldptel"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "ldptel.aggregator.cli"]
    return [*base, "demo", *args]


def marked_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment carries ``MARKER=marker`` (Linux /proc)."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(marker: str, timeout: float = 30.0) -> list[int]:
    """The processes still carrying ``marker`` once none is left or ``timeout`` passed (a loaded machine
    reaps slowly: the timeout only tells a leak from slowness)."""
    try:
        wait_until(lambda: not marked_processes(marker), timeout=timeout, what="marked processes to exit")
    except AssertionError:
        pass
    return marked_processes(marker)


needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="scans /proc for leftover processes")


@needs_proc
def test_demo_runs_end_to_end_and_leaves_nothing_behind(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    chart = tmp_path / "demo.png"
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, **{MARKER: marker})
    started = time.monotonic()
    proc = subprocess.run(
        demo_command("--devices", "200", "--epsilon", "4", "--mechanism", "cms", "--k", "64", "--m", "256",
                     "--seed", "7", "--top", "5", "--chart", str(chart), "--workdir", str(work), "--threads", "4"),
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"

    # the top-5 table: rank, emoji, name, estimate, [low, high] interval, true count, true rank, inside
    emoji_part = out.split("\ndemo.words:")[0]
    rows = re.findall(r"^\s+(\d+)\s+\S+\s+.+?\s+(-?[\d,]+)\s+\[(-?[\d,]+), (-?[\d,]+)\]\s+([\d,]+)\s+(\d+)\s+(yes|NO)$", emoji_part, re.M)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5], out
    for _rank, est, low, high, _true, _true_rank, _inside in rows:
        assert int(low.replace(",", "")) <= int(est.replace(",", "")) <= int(high.replace(",", ""))
    estimates = [int(r[1].replace(",", "")) for r in rows]
    assert estimates == sorted(estimates, reverse=True)
    assert "demo.emoji: cms" in out and "n = 200 reports" in out
    # the rr line: estimate with its interval beside the truth
    assert re.search(r"demo\.dark_mode \(rr, ε = 4\): dark mode on for [\d.]+% estimated \(95% interval [\d.-]+% to [\d.]+%\), true [\d.]+%", out), out
    # the summary
    assert re.search(r"^wall time: [\d.]+ s", out, re.M)
    assert "devices: 200 (seed 7" in out
    assert "reports delivered: 1,200 of 1,200 queued" in out and "folded by the aggregator: 1,200" in out
    # the discovered words (2 per device, no word list given to the aggregator) beside the truth
    assert re.search(r"^demo\.words: pem, discovered with no word list · n = 400 reports · \d+ words at ≥ [\d.]+ stderr, "
                     r"[\d,]+ candidates examined in 12 rounds", out, re.M), out
    assert re.search(r"^true top \d+:", out, re.M), out
    assert re.search(r"^p99\s+[\d,.]+\s+\[[\d,.]+, [\d,.]+\]\s+[\d,.]+\s+(yes|NO)$", out, re.M), out  # session length
    assert re.search(r"epsilon per report \(effective\): demo\.emoji 3\.9\d+ \(cms\), demo\.dark_mode 4\.0000 \(rr\)", out), out
    assert re.search(r"accuracy: top-5 mean absolute error [\d.,]+ reports = [\d.]+ percentage points of frequency; "
                     r"\d/5 true counts inside their 95% intervals", out), out
    # the chart: a real PNG of some size
    data = chart.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    # progress went to stderr as plain lines (not a terminal), results to stdout
    assert "ldptel demo: devices 200/200" in err and "\r" not in err
    # nothing left: the pids it reported, every process that inherited the marker, the work directory
    pids = dict(re.findall(r"(\w+)=(\d+)", re.search(r"^pids: (.*)$", out, re.M).group(1)))  # type: ignore[union-attr]
    assert set(pids) == {"redis", "ingest", "aggregator"}
    assert not [p for p in pids.values() if pid_alive(int(p))]
    assert wait_gone(marker) == []
    assert list(work.iterdir()) == []
    assert elapsed < 60


def _wait_for_line(proc: subprocess.Popen[bytes], err_path: Path, needle: bytes) -> None:
    def printed() -> bool:
        assert proc.poll() is None, err_path.read_text()
        return needle in err_path.read_bytes()

    wait_until(printed, what=lambda: f"the demo to print {needle!r}: {err_path.read_text()[-2000:]}")


@needs_proc
def test_ctrl_c_stops_everything_promptly(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    work = tmp_path / "work"
    work.mkdir()
    err_path = tmp_path / "stderr.txt"
    env = dict(os.environ, **{MARKER: marker})
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(
            demo_command("--devices", "100000", "--no-chart", "--workdir", str(work)),
            env=env, stdout=subprocess.PIPE, stderr=err_file, cwd=tmp_path,
            start_new_session=True,  # its own group, like a shell job: Ctrl-C goes to the whole group
            # started as `ldptel demo &` in a script is: SIGINT ignored, which the demo must override
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
        try:
            _wait_for_line(proc, err_path, b"ldptel demo: devices")  # devices are reporting
            assert len(marked_processes(marker)) >= 4  # demo, redis, gunicorn (+ worker), aggregator
            os.killpg(proc.pid, signal.SIGINT)
            sent = time.monotonic()
            code = proc.wait(timeout=20)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    err = err_path.read_text()
    assert code == 130, err
    assert "interrupted; every process it started was stopped" in err
    assert took < 15, f"took {took:.1f}s to stop"
    assert wait_gone(marker) == []
    assert list(work.iterdir()) == []


@needs_proc
def test_sigterm_is_cleaned_up_like_ctrl_c(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    err_path = tmp_path / "stderr.txt"
    env = dict(os.environ, **{MARKER: marker})
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(demo_command("--devices", "100000", "--no-chart", "--workdir", str(tmp_path)),
                                env=env, stdout=subprocess.DEVNULL, stderr=err_file)
        try:
            _wait_for_line(proc, err_path, b"processes:")
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 128 + signal.SIGTERM, err_path.read_text()
    assert wait_gone(marker) == []
    assert [p.name for p in tmp_path.iterdir()] == ["stderr.txt"]


# ------------------------------------------------------------------------------- in-process, no servers
def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = demo.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--devices", "0"], "--devices"),
        (["--devices", "many"], "--devices"),
        (["--mechanism", "rappor"], "--mechanism"),
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "nan"], "--epsilon"),
        (["--m", "1000"], "m"),
        (["--top", "0"], "--top"),
        (["--chart", "/no/such/dir/x.png"], "--chart"),
        (["--workdir", "/no/such/dir"], "--workdir"),
        (["--unknown"], "unrecognized"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv: list[str], needle: str, tmp_path: Path) -> None:
    code, out, err = run_main(*argv, "--workdir", str(tmp_path)) if "--workdir" not in argv else run_main(*argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ldptel demo: error: ") and needle in err, err
    assert list(tmp_path.iterdir()) == []  # nothing was started or created


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--devices", "--epsilon", "--mechanism", "--seed", "--top", "--chart", "--workdir", "--keep"):
        assert flag in text


def test_cli_passes_demo_arguments_through(capsys: pytest.CaptureFixture[str]) -> None:
    from ldptel.aggregator.cli import main as cli_main

    assert cli_main(["demo", "--devices", "0"]) == 2
    assert "--devices must be between 1" in capsys.readouterr().err


def test_shipped_distribution_is_heavy_headed_with_a_long_tail() -> None:
    dist = demo.load_distribution()
    assert 200 <= len(dist.values) <= 1000
    assert len(set(dist.values)) == len(dist.values)
    assert abs(float(dist.weights.sum()) - 1.0) < 1e-9
    w = dist.weights
    assert (w[:-1] >= w[1:]).all()  # ranked
    assert 0.04 < w[0] < 0.15  # the most used emoji
    assert 0.25 < w[:10].sum() < 0.5  # heavy head
    assert w[100:].sum() > 0.15  # long tail
    assert dist.values[0] == "😂" and dist.names[0] == "face with tears of joy"


def test_shipped_word_list_is_what_a_pem_metric_takes() -> None:
    from ldptel.aggregator.demo.config import WORDS_FILE, DemoConfig, build_words_spec
    from ldptel.client.mechanisms import Discovering, get_mechanism

    words = demo.load_distribution(shipped=WORDS_FILE)
    spec = build_words_spec(DemoConfig())
    mech = get_mechanism(spec.mechanism)
    assert isinstance(mech, Discovering) and len(words.values) >= 200 and len(set(words.values)) == len(words.values)
    for word in words.values:  # every word is a value a device can report (1–16 UTF-8 bytes, no NUL)
        mech.value_key(word, spec.params)
    assert (words.weights[:-1] >= words.weights[1:]).all()
    assert any(len(w.encode()) > len(w) for w in words.values[:30])  # other scripts and emoji in the head
