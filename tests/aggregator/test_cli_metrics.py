"""``ldptel metrics``: metadata edits in place, expired metrics, and ``plan``/``diff``/``apply`` of a TOML file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.storage import keys, registry
from tests.aggregator.agg_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "metrics.example.toml"


@pytest.fixture(autouse=True)
def env_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LDPTEL_REDIS_URL", redis_url)
    return redis_url


CMS = ("metrics", "create", "emoji", "--mechanism", "cms", "--epsilon", "4", "--k", "64", "--m", "256")


def test_a_new_description_is_not_a_new_version(redis: redis_lib.Redis) -> None:
    """Regression: `metrics create` with only a new description silently created version 2."""
    assert run_cli(*CMS, "--description", "emoji usage")[0] == 0
    code, _, err = run_cli(*CMS, "--description", "Emoji usage, per device and day")
    assert code == 0, err
    record = registry.get_metric(redis, "emoji")
    assert record.current_version == 1 and list(record.versions) == [1]
    assert run_cli(*CMS, "--description", "Emoji usage, per device and day", "--owner", "growth", "--notes", "n")[0] == 0
    record = registry.get_metric(redis, "emoji")
    assert record.current_version == 1
    assert (record.current.description, record.current.owner, record.current.notes) == (
        "Emoji usage, per device and day", "growth", "n")
    assert run_cli(*CMS, "--epsilon", "2")[0] == 0  # argparse keeps the last --epsilon: a privatization change
    assert registry.get_metric(redis, "emoji").current_version == 2


def test_list_shows_expired_metrics(redis: redis_lib.Redis) -> None:
    assert run_cli(*CMS, "--expires", "2020-01-31", "--owner", "growth")[0] == 0
    assert run_cli("metrics", "create", "flag", "--mechanism", "rr", "--epsilon", "1", "--expires", "2999-01-01")[0] == 0
    code, out, _ = run_cli("metrics", "list")
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "expired" in lines["emoji"] and "2020-01-31" in lines["emoji"] and "growth" in lines["emoji"]
    assert "active" in lines["flag"] and "expired" not in lines["flag"]
    rows = {row["name"]: row for row in json.loads(run_cli("metrics", "list", "--format", "json")[1])["metrics"]}
    assert rows["emoji"]["expired"] is True and rows["flag"]["expired"] is False
    assert rows["emoji"]["current"]["expires"] == "2020-01-31"
    assert run_cli(*CMS, "--expires", "2020-02-30")[0] == 2  # argparse's usage error


def test_the_example_file_applies_and_is_then_in_sync(redis: redis_lib.Redis) -> None:
    code, out, err = run_cli("metrics", "plan", str(EXAMPLE))
    assert code == 0, err
    assert out.startswith("would apply: 3 to create") and redis.hlen(keys.registry()) == 0  # a dry run
    assert run_cli("metrics", "diff", str(EXAMPLE))[0] == 1
    code, out, err = run_cli("metrics", "apply", str(EXAMPLE))
    assert code == 0, err and out.startswith("applied: 3 to create")
    theme = registry.get_metric(redis, "theme").current
    assert theme.params.domain == ("light", "dark", "high-contrast")  # type: ignore[attr-defined]
    assert theme.expires == "2027-12-31" and theme.owner == "design@example.com"
    assert registry.get_metric(redis, "emoji").current.mechanism == "oue-cms"
    assert run_cli("metrics", "diff", str(EXAMPLE)) == (0, "no differences: the registry matches the file\n", "")
    assert "3 unchanged" in run_cli("metrics", "apply", str(EXAMPLE))[1]  # idempotent


def test_plan_flags_new_versions_with_their_epsilon_and_apply_edits_metadata_in_place(
    redis: redis_lib.Redis, tmp_path: Path
) -> None:
    assert run_cli("metrics", "apply", str(EXAMPLE))[0] == 0
    text = EXAMPLE.read_text()
    edited = tmp_path / "metrics.toml"
    edited.write_text(
        text.replace('description = "dark mode is on"', 'description = "dark mode is on (system or app)"')
        .replace("[metrics.dark_mode]\nmechanism = \"rr\"\nepsilon = 1", "[metrics.dark_mode]\nmechanism = \"rr\"\nepsilon = 2")
        .replace('owner = "messaging-team@example.com"', 'owner = "chat-team@example.com"')
    )
    before = redis.hgetall(keys.registry())
    code, out, err = run_cli("metrics", "plan", str(edited))
    assert code == 0, err
    assert "1 metadata edit(s) in place" in out and "1 NEW VERSION(S)" in out
    assert "~ emoji: edit v1 in place" in out and "owner: 'messaging-team@example.com' → 'chat-team@example.com'" in out
    assert "! dark_mode: NEW VERSION v2 (current v1)" in out and "epsilon: 1.0 → 2.0  (privatization)" in out
    assert "!! ε per report 1 → 2" in out
    assert "ε∞ " in out and "+" in out  # rr: a new permanent randomization adds up
    assert redis.hgetall(keys.registry()) == before
    doc = json.loads(run_cli("metrics", "plan", str(edited), "--format", "json")[1])
    by_name = {m["name"]: m for m in doc["metrics"]}
    assert doc["applied"] is False and by_name["theme"]["change"] == "unchanged"
    assert by_name["dark_mode"]["change"] == "version" and by_name["dark_mode"]["version"] == 2
    assert {"field": "epsilon", "before": 1.0, "after": 2.0, "privatization": True} in by_name["dark_mode"]["fields"]
    assert by_name["dark_mode"]["consequences"] and not by_name["emoji"]["consequences"]
    assert [f["privatization"] for f in by_name["emoji"]["fields"]] == [False]
    code, out, _ = run_cli("metrics", "diff", str(edited))
    assert code == 1 and "dark_mode (v1):" in out and "description: 'dark mode is on' → 'dark mode is on (system or app)'" in out
    assert run_cli("metrics", "apply", str(edited))[0] == 0
    assert registry.get_metric(redis, "emoji").current_version == 1
    assert registry.get_metric(redis, "emoji").current.owner == "chat-team@example.com"
    assert registry.get_metric(redis, "dark_mode").current_version == 2


def test_an_invalid_file_names_every_bad_metric_and_field_and_changes_nothing(redis: redis_lib.Redis, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        EXAMPLE.read_text()
        + '\n[metrics.pages]\nmechanism = "cms"\nepsilon = 4\nk = 0\nm = 256\n'
        + '\n[metrics.late]\nmechanism = "rr"\nepsilon = 1\nexpires = "next year"\n'
        + '\n[metrics.typo]\nmechanism = "rr"\nepsilon = 1\nowners = "x"\n'
    )
    code, _, err = run_cli("metrics", "apply", str(bad))
    assert code == 2 and "3 invalid metric(s), nothing was changed" in err
    assert "metric 'pages', field 'k'" in err and "metric 'late', field 'expires'" in err and "metric 'typo', field 'owners'" in err
    assert redis.hlen(keys.registry()) == 0
    bad.write_text("[metrics.x\n")
    code, _, err = run_cli("metrics", "plan", str(bad))
    assert code == 2 and "is not valid TOML" in err


def test_a_shard_conflict_writes_nothing(redis: redis_lib.Redis, tmp_path: Path) -> None:
    assert run_cli("metrics", "create", "dark_mode", "--mechanism", "rr", "--epsilon", "1", "--shards", "2")[0] == 0
    before = redis.hgetall(keys.registry())
    conflict = tmp_path / "m.toml"
    conflict.write_text(EXAMPLE.read_text().replace('description = "dark mode is on"', 'description = "x"\nshards = 8'))
    code, _, err = run_cli("metrics", "apply", str(conflict))
    assert code == 2 and "metric 'dark_mode', field 'shards'" in err
    assert redis.hgetall(keys.registry()) == before  # emoji and theme were not created either


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mechanism", "oue-cms", "--epsilon", "4"], "ldptel: error: --mechanism oue-cms needs --k and --m"),
        (["--mechanism", "oue-cms", "--epsilon", "4", "--k", "256"], "ldptel: error: --mechanism oue-cms needs --m"),
        (["--mechanism", "pem", "--epsilon", "4", "--k", "16", "--m", "256"], "ldptel: error: --mechanism pem needs --max-bytes"),
    ],
)
def test_missing_params_name_the_options_never_a_python_error(redis: redis_lib.Redis, argv: list[str], message: str) -> None:
    """Issue 31 §3: `--mechanism oue-cms` without --k/--m printed OueCmsParams.__init__()'s TypeError."""
    code, out, err = run_cli("metrics", "create", "emoji", *argv)
    assert code == 2 and out == "" and err.startswith(message) and "__init__" not in err
    assert registry.list_metrics(redis) == []


def test_the_library_names_missing_params_by_their_keys() -> None:
    from ldptel.client.errors import InvalidParameterError
    from ldptel.client.protocol.specs import params_from_dict

    with pytest.raises(InvalidParameterError) as info:
        params_from_dict({"mechanism": "oue-cms", "epsilon": 4})
    assert str(info.value) == "params must be oue-cms params with k and m (missing), got ['epsilon']"
