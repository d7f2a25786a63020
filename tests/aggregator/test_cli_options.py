"""Where the CLI's options come from: ``metrics create`` has a flag per params field, derived from the mechanisms'
params schemas (one vocabulary with the TOML file: ``hash_seed`` is ``--hash-seed``), and passes the ones it was
given to the params as they are (the params say what is valid); ``aggregate`` takes its defaults from WorkerConfig."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import redis as redis_lib

from ldptel.aggregator.cli import main, params_options
from ldptel.aggregator.worker import WorkerConfig
from ldptel.client.mechanisms import get_mechanism, mechanism_names
from ldptel.client.protocol.specs import params_from_dict
from ldptel.storage import registry
from tests.aggregator.agg_helpers import run_cli


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--mechanism", "rr", "--epsilon", "1", "--k", "4"), "--mechanism rr does not take --k (it takes --prob-bits)"),
        (("--mechanism", "grr", "--epsilon", "1", "--domain", "a,b", "--m", "64"), "grr does not take --m"),
        (("--mechanism", "cms", "--epsilon", "4", "--domain", "a,b"), "cms does not take --domain"),
        (("--mechanism", "cms", "--epsilon", "4"), "--mechanism cms needs --k and --m"),
        (("--mechanism", "oue-cms", "--epsilon", "4", "--k", "4"), "--mechanism oue-cms needs --m (--m: one of 8, 16"),
        (("--mechanism", "grr", "--epsilon", "1"), "--mechanism grr needs --domain"),
        (("--mechanism", "mean", "--epsilon", "1", "--lo", "0"), "--mechanism mean needs --hi"),
        (("--mechanism", "mean", "--epsilon", "1", "--range", "0", "1", "--hi", "2"), "--range sets --hi: give one"),
        (("--mechanism", "num-histogram", "--epsilon", "1", "--buckets", "4"), "--buckets needs --range LO HI"),
    ],
)
def test_a_wrong_option_for_the_mechanism_is_the_params_error(
    redis: redis_lib.Redis, redis_url: str, options: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli("metrics", "create", "bad", "--redis-url", redis_url, *options)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "error: " in err and message in err, err
    assert "__init__" not in err and "Traceback" not in err
    assert registry.list_metrics(redis) == []


def test_every_params_field_of_every_mechanism_has_its_flag() -> None:
    """The flags are the schema's fields (a new mechanism's new field needs no CLI edit: tests/test_new_kind.py)."""
    parser = argparse.ArgumentParser()
    params_options.add_params_options(parser)
    flags = {opt for action in parser._actions for opt in action.option_strings}
    for name in mechanism_names():
        fields, _ = get_mechanism(name).params_schema()
        for field in set(fields) - {"mechanism", "epsilon"}:
            assert "--" + field.replace("_", "-") in flags, (name, field)


@pytest.mark.parametrize(
    ("flags", "toml"),
    [
        (("--mechanism", "mean", "--epsilon", "1", "--lo", "0", "--hi", "5", "--variant", "dhm"),
         {"mechanism": "mean", "epsilon": 1, "lo": 0, "hi": 5, "variant": "dhm"}),
        (("--mechanism", "mean", "--epsilon", "1", "--range", "0", "5"), {"mechanism": "mean", "epsilon": 1, "lo": 0, "hi": 5}),
        (("--mechanism", "num-histogram", "--epsilon", "2", "--edges", "0,1,10,100", "--encoding", "oue"),
         {"mechanism": "num-histogram", "epsilon": 2, "edges": [0, 1, 10, 100], "encoding": "oue"}),
        (("--mechanism", "num-histogram", "--epsilon", "2", "--buckets", "4", "--lo", "0", "--hi", "8"),
         {"mechanism": "num-histogram", "epsilon": 2, "edges": [0, 2, 4, 6, 8]}),
        (("--mechanism", "pem", "--epsilon", "4", "--k", "4", "--m", "64", "--max-bytes", "12"),
         {"mechanism": "pem", "epsilon": 4, "k": 4, "m": 64, "max_bytes": 12}),
    ],
)
def test_flags_and_toml_keys_are_one_vocabulary(
    redis: redis_lib.Redis, redis_url: str, tmp_path: Path, flags: tuple[str, ...], toml: dict[str, object]
) -> None:
    """The same metric from flags and from a TOML table with the same names gives equal params."""
    code, _, err = run_cli("metrics", "create", "a", "--redis-url", redis_url, *flags)
    assert code == 0, err
    body = "\n".join(f"{key} = {json.dumps(value)}" for key, value in toml.items())
    (tmp_path / "m.toml").write_text(f"[metrics.b]\n{body}\n")
    code, _, err = run_cli("metrics", "apply", str(tmp_path / "m.toml"), "--redis-url", redis_url)
    assert code == 0, err
    assert registry.get_metric(redis, "a").current.params == registry.get_metric(redis, "b").current.params


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
