"""deploy/ cannot run here (no Docker engine): check it statically against the code it starts.

The compose file and Dockerfile parse, every file they reference exists, every command they run is
accepted by the real `ldptel` argument parser (or is gunicorn with our config), and the gunicorn config
and systemd units point at things that exist.
"""

from __future__ import annotations

import configparser
import ipaddress
import json
import runpy
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import redis
import yaml

from ldptel.aggregator.cli import build_parser
from ldptel.aggregator.cli.common import read_values
from ldptel.aggregator.cli.metrics_file import load_metrics_file
from ldptel.client.mechanisms import Sketch, mechanism_of
from ldptel.storage.embedded import find_server_binary
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    assert redis["command"][1] == "/usr/local/etc/redis/redis.conf"
    assert redis["command"][2:] == ["--dir", "/data"] and any(v.endswith(":/data") for v in redis["volumes"])
    assert any(v.startswith("./redis-container.conf:") for v in redis["volumes"])  # not the host config
    assert "redis-data" in compose["volumes"]
    ingest = services["ingest"]
    assert ingest["environment"]["LDPTEL_REDIS_URL"].startswith("redis://redis:6379")
    # Clients reach gunicorn only through the buffering front (slow clients would starve its threads).
    assert "ports" not in ingest
    front = services["front"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in front["volumes"] and front["ports"] == ["8000:8080"]
    assert "server ingest:8000;" in (DEPLOY / "nginx.conf").read_text()
    # The ingest believes X-Forwarded-For from the front's fixed address only (issue 22 §2).
    assert ingest["environment"]["LDPTEL_TRUSTED_PROXIES"] == front["networks"]["default"]["ipv4_address"]
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(front["networks"]["default"]["ipv4_address"]) in ipaddress.ip_network(subnet)
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in (DEPLOY / "nginx.conf").read_text()


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
                assert (DEPLOY / source).exists(), f"missing {source}"
        env_file = svc.get("env_file")
        if env_file:
            assert (DEPLOY / f"{env_file}.example").is_file(), "ship an example of every env file"


def _host_path(service: dict, container_path: str) -> Path:
    """The host file behind a path inside a service's container, through its bind-mounted volumes."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./") and (container_path == target or container_path.startswith(target + "/")):
            return DEPLOY / source / Path(container_path).relative_to(target)
    raise AssertionError(f"{container_path} is on no volume of the service: the container cannot read it")


def test_the_compose_files_own_cli_examples_work() -> None:
    """Regression: its `cli ldptel estimate emoji` example had no candidates file and no volume to give one."""
    compose = _compose()
    services = compose["services"]
    examples = [line.split("run ", 1)[1] for line in (DEPLOY / "docker-compose.yml").read_text().splitlines()
                if line.startswith("#") and "docker compose" in line and " run " in line]
    assert any("estimate" in example for example in examples)
    apply = services["create-metrics"]["command"]
    assert apply[1:3] == ["metrics", "apply"]
    specs = {m.spec.name: m.spec for m in load_metrics_file(str(_host_path(services["create-metrics"], apply[3])))}
    for example in examples:
        words = shlex.split(example.split("<")[0])
        options = [w for w in words[: words.index("ldptel")] if w.startswith("-")]
        assert set(options) <= {"--rm", "-T"}, example
        service = services[words[len(options)]]
        argv = words[words.index("ldptel"):]
        _check_command(argv)
        args = build_parser().parse_args(argv[1:])
        if args.command == "estimate" and isinstance(mechanism_of(specs[args.metric].params), Sketch):
            assert args.candidates or args.candidate, f"{example}: a sketch metric needs candidates"
        if getattr(args, "candidates", None) not in (None, "-"):
            assert len(read_values(str(_host_path(service, args.candidates)), what="candidates")) >= 20


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


def test_trusted_proxies_the_app_accepts_also_start_gunicorn(monkeypatch: pytest.MonkeyPatch) -> None:
    """LDPTEL_TRUSTED_PROXIES is read by the app (strict=False) and by gunicorn (strict): the config hands gunicorn
    the app's normalised networks, so a value the app accepts never stops gunicorn (review finding 8)."""
    from gunicorn.config import Config

    monkeypatch.setenv("LDPTEL_TRUSTED_PROXIES", "10.0.0.5/24, 127.0.0.1,")
    conf = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    assert conf["forwarded_allow_ips"] == "10.0.0.0/24,127.0.0.1/32"
    Config().set("forwarded_allow_ips", conf["forwarded_allow_ips"])  # gunicorn's own validation: raises if refused


def _redis_settings(name: str) -> dict[str, str]:
    settings = {}
    for line in (DEPLOY / name).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            settings[key] = value
    return settings


@pytest.mark.parametrize("name", ["redis.conf", "redis-container.conf"])
def test_redis_conf_keeps_reports(name: str) -> None:
    settings = _redis_settings(name)
    assert settings["appendonly"] == "yes"
    assert settings["appendfsync"] == "always"  # acknowledged = on disk (tests/faults/test_durability.py)
    assert settings["no-appendfsync-on-rewrite"] == "no"  # "yes" would skip the fsyncs during an AOF rewrite
    assert settings["maxmemory-policy"] == "noeviction"
    assert settings["rdbcompression"] == "no"  # the AOF rewrite does not LZF incompressible report bits


def test_the_host_redis_conf_is_loopback_only_and_the_container_one_differs_only_in_its_network() -> None:
    host, container = _redis_settings("redis.conf"), _redis_settings("redis-container.conf")
    assert host["bind"].split() == ["127.0.0.1", "-::1"] and host["protected-mode"] == "yes"
    assert container["bind"] == "0.0.0.0" and container["protected-mode"] == "no"
    network = {"bind", "protected-mode"}
    assert {k: v for k, v in host.items() if k not in network} == {k: v for k, v in container.items() if k not in network}
    for compose in ("docker-compose.yml", "docker-compose.cluster.yml"):  # containers get the container file
        text = (DEPLOY / compose).read_text()
        assert "./redis-container.conf:" in text and "./redis.conf:" not in text


def test_redis_conf_runs_outside_a_container_with_dir_on_the_command_line(tmp_path: Path) -> None:
    """Regression: `dir /data` in the file was fatal on any host without /data, before --dir was read. Started
    as the README says (no --bind): the host file itself binds loopback."""
    port = _free_port()
    log = tmp_path / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(find_server_binary()), str(DEPLOY / "redis.conf"), "--dir", str(tmp_path), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )  # fmt: skip
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1)
        def answers() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, what=lambda: f"redis-server to answer: {log.read_text()}")
        assert client.config_get("dir")["dir"] == str(tmp_path)
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("appendfsync")["appendfsync"] == "always"
        assert client.config_get("bind")["bind"] == "127.0.0.1 -::1"  # the file's own bind: loopback only
        assert client.config_get("protected-mode")["protected-mode"] == "yes"
        client.set("k", "v")
        assert (tmp_path / "appendonly").is_dir()  # the AOF went where --dir said
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


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
