"""deploy/ cannot run here (no Docker engine): check it statically against the code it starts.

The compose file and Dockerfile parse, every file they reference exists, every command they run is
accepted by the real `ldptel` argument parser (or is gunicorn with our config), and the gunicorn config
and systemd units point at things that exist.
"""

from __future__ import annotations

import configparser
import json
import runpy
import shlex
from pathlib import Path

import pytest
import yaml

from ldptel.aggregator.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _check_command(argv: list[str]) -> None:
    """A command a container or unit runs: `ldptel ...` must parse; gunicorn must use our config."""
    prog = Path(argv[0]).name
    if prog == "ldptel":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as exc:  # argparse exits on a bad command line
            raise AssertionError(f"the ldptel CLI rejects {argv!r}") from exc
    elif prog == "gunicorn":
        conf = argv[argv.index("-c") + 1]
        assert Path(conf).name == "gunicorn.conf.py"
    elif prog in ("redis-server", "redis-cli", "python"):
        pass
    else:
        raise AssertionError(f"unexpected program {prog!r} in {argv!r}")


def test_compose_file_has_the_services_and_valid_commands() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"redis", "ingest", "aggregator", "create-metrics"} <= set(services)
    assert services["create-metrics"]["restart"] == "no"  # a one-shot job
    for name, svc in services.items():
        command = svc.get("command")
        if command:
            assert isinstance(command, list), f"{name}: use the exec (list) form"
            _check_command(command)
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
    # Redis is started with our config and a persistent volume.
    redis = services["redis"]
    assert redis["command"][-1] == "/usr/local/etc/redis/redis.conf"
    assert any(v.startswith("./redis.conf:") for v in redis["volumes"])
    assert "redis-data" in compose["volumes"]
    ingest = services["ingest"]
    assert ingest["environment"]["LDPTEL_REDIS_URL"].startswith("redis://redis:6379")


def test_compose_references_existing_files() -> None:
    compose = _compose()
    for svc in compose["services"].values():
        build = svc.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file()
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).is_file(), f"missing {source}"
        env_file = svc.get("env_file")
        if env_file:
            assert (DEPLOY / f"{env_file}.example").is_file(), "ship an example of every env file"


def test_dockerfile_copies_existing_paths_and_runs_gunicorn_with_our_config() -> None:
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0].startswith("FROM python:3.1")
    for line in instructions:
        if line.startswith("COPY "):
            *sources, _dest = shlex.split(line)[1:]
            for src in sources:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    cmd = json.loads(next(line for line in instructions if line.startswith("CMD "))[4:])
    _check_command(cmd)
    assert any(line.startswith("USER ") and "root" not in line for line in instructions)


def test_gunicorn_config_loads_and_names_our_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDPTEL_BIND", "127.0.0.1:9999")
    conf = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    assert conf["wsgi_app"] == "ldptel.server:create_app()"
    assert conf["bind"] == ["127.0.0.1:9999"]
    assert "%(h)s" not in conf["access_log_format"]  # no client address in access logs


def test_redis_conf_keeps_reports() -> None:
    settings = {}
    for line in (DEPLOY / "redis.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            settings[key] = value
    assert settings["appendonly"] == "yes"
    assert settings["appendfsync"] in ("everysec", "always")
    assert settings["maxmemory-policy"] == "noeviction"
    assert settings["rdbcompression"] == "no"  # the AOF rewrite does not LZF incompressible report bits


@pytest.mark.parametrize("unit", sorted((DEPLOY / "systemd").glob("*.service")), ids=lambda p: p.name)
def test_systemd_units_run_valid_commands(unit: Path) -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(unit)
    exec_start = shlex.split(parser["Service"]["ExecStart"].replace("%H", "host").replace("%i", "1"))
    _check_command(exec_start)
    assert parser["Service"]["User"] != "root"
    assert parser["Install"]["WantedBy"] == "multi-user.target"


def test_scaling_notes_exist_and_cover_the_components() -> None:
    text = (DEPLOY / "SCALING.md").read_text()
    for topic in ("ingest", "shard", "aggregator", "Redis Cluster"):
        assert topic in text


def test_cluster_compose_variant_runs_three_primaries_and_a_cluster_url() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.cluster.yml").read_text())
    services = compose["services"]
    nodes = [name for name in services if name.startswith("redis-")]
    assert len(nodes) == 3
    for name in nodes:
        command = services[name]["command"]
        assert command[:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"] and "--cluster-enabled" in command
    create = services["cluster-create"]["command"][-1]
    assert all(f"{name}:6379" in create for name in nodes) and "--cluster create" in create
    from ldptel.storage.client import parse_redis_url

    for name in ("ingest", "aggregator", "create-metrics", "cli"):
        svc = services[name]
        _check_command(svc["command"])
        target = parse_redis_url(svc["environment"]["LDPTEL_REDIS_URL"])
        assert target.cluster and {host for host, _ in target.seeds} == set(nodes)
        assert "cluster-create" in svc["depends_on"]
