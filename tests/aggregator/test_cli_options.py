"""Where the CLI's options come from: ``metrics create`` passes the mechanism options it was given to the params
as they are (the params say what is valid), and ``aggregate`` takes its defaults from WorkerConfig."""

from __future__ import annotations

import pytest
import redis as redis_lib

from ldptel.aggregator.cli import main
from ldptel.aggregator.worker import WorkerConfig
from ldptel.client.protocol.specs import params_from_dict
from ldptel.storage import registry
from tests.aggregator.agg_helpers import run_cli


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--mechanism", "rr", "--epsilon", "1", "--k", "4"), "k must be not set: rr takes"),
        (("--mechanism", "grr", "--epsilon", "1", "--domain", "a,b", "--m", "64"), "m must be not set: grr takes"),
        (("--mechanism", "cms", "--epsilon", "4", "--domain", "a,b"), "domain must be not set: cms takes"),
        (("--mechanism", "cms", "--epsilon", "4"), "--mechanism cms needs --k and --m"),
        (("--mechanism", "grr", "--epsilon", "1"), "--mechanism grr needs --domain"),
    ],
)
def test_a_wrong_option_for_the_mechanism_is_the_params_error(
    redis: redis_lib.Redis, redis_url: str, options: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli("metrics", "create", "bad", "--redis-url", redis_url, *options)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ldptel: error: ") and message in err, err
    assert registry.list_metrics(redis) == []


def test_given_options_reach_the_params_unchanged(redis: redis_lib.Redis, redis_url: str) -> None:
    code, _, err = run_cli("metrics", "create", "pages", "--redis-url", redis_url, "--mechanism", "hcms", "--epsilon", "3",
                       "--k", "8", "--m", "64", "--hash-seed", "7", "--prob-bits", "12")
    assert code == 0, err
    want = params_from_dict({"mechanism": "hcms", "epsilon": 3.0, "k": 8, "m": 64, "hash_seed": 7, "prob_bits": 12})
    assert registry.get_metric(redis, "pages").current.params == want


def test_aggregate_defaults_are_the_worker_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["aggregate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    defaults = WorkerConfig()
    for option, field in [("--batch N", "batch"), ("--checkpoint-every N", "checkpoint_every"),
                          ("--lease-ttl S", "lease_ttl"), ("--retention S", "retention_seconds"),
                          ("--block S", "block_seconds"), ("--rescan S", "rescan_seconds")]:
        value = getattr(defaults, field)
        assert f"{option} " in text and f"(default {value:g})" in text.split(f"{option} ", 1)[1].split(" --", 1)[0]
