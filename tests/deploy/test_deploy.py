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
        assert Path(conf).name in ("gunicorn.conf.py", "gunicorn-dashboard.conf.py")
        assert (DEPLOY / Path(conf).name).is_file()
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


@pytest.mark.parametrize("name", ["gunicorn.conf.py", "gunicorn-dashboard.conf.py"])
def test_both_gunicorn_configs_take_the_shared_settings_from_the_environment_of_each_load(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The ingest's and the dashboard's configs share the logging and proxy settings (one module,
    ldptel.server.gunicorn_settings): each load reads the environment of then (a second load with another
    environment is not served the first one's values), and gunicorn's own Config accepts every setting either file
    sets (a misspelt or ill-typed one would raise or be ignored)."""
    from gunicorn.config import Config

    loads = []
    for proxies, access, level in (("10.0.0.5/24, 127.0.0.1,", "", "debug"), ("", "-", "warning")):
        monkeypatch.setenv("LDPTEL_TRUSTED_PROXIES", proxies)
        monkeypatch.setenv("LDPTEL_ACCESS_LOG", access)
        monkeypatch.setenv("LDPTEL_LOG_LEVEL", level)
        loads.append(runpy.run_path(str(DEPLOY / name)))
    first, second = loads
    assert (first["forwarded_allow_ips"], first["accesslog"], first["loglevel"]) == ("10.0.0.0/24,127.0.0.1/32", None, "debug")
    assert (second["forwarded_allow_ips"], second["accesslog"], second["loglevel"]) == ("", "-", "warning")
    for conf in loads:
        assert conf["logger_class"] == "ldptel.server.gunicorn_logger.AnonymousLogger"
        assert "%(h)s" not in conf["access_log_format"] and (conf["keepalive"], conf["graceful_timeout"]) == (5, 20)
        cfg = Config()
        settings = {k: v for k, v in conf.items() if k in cfg.settings}
        assert {"wsgi_app", "bind", "workers", "worker_class", "logger_class", "forwarded_allow_ips"} <= set(settings)
        for key, value in settings.items():
            if value is not None and not callable(value):
                cfg.set(key, value)  # gunicorn's own validation of each value


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


# ------------------------------------------------------------------ deploy without Docker: nginx-host.conf + dashboard
HOST_HEADER_END = "# The comments below are deploy/nginx.conf's"
DASHBOARD_START = "    # The dashboard (gunicorn"


def _host_conf_parts() -> tuple[str, str]:
    """(nginx-host.conf without its own header and dashboard server, the dashboard server part)."""
    text = (DEPLOY / "nginx-host.conf").read_text()
    body = text.split(HOST_HEADER_END, 1)[1].split("\n", 2)[2]  # after the header line and its "#" line
    main, dashboard = body.split(DASHBOARD_START, 1)
    return main.rstrip("\n") + "\n}\n", DASHBOARD_START + dashboard


def test_the_host_nginx_conf_differs_from_the_compose_one_only_in_its_upstreams_and_dashboard() -> None:
    """Two files, one front: everything but the ingest's upstream address (and the added dashboard server) is the
    compose file's, so a fix to one that is not made to the other fails here."""
    main, dashboard = _host_conf_parts()
    compose = (DEPLOY / "nginx.conf").read_text()
    assert "server 127.0.0.1:8000;" in main and "ingest:8000" not in main
    assert main == compose.replace("server ingest:8000;", "server 127.0.0.1:8000;")
    assert "server 127.0.0.1:8050;" in dashboard and "listen 127.0.0.1:8081;" in dashboard  # loopback only
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in dashboard


def test_the_dashboard_gunicorn_config_runs_one_worker_of_the_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions live in the process's memory: one worker whatever the environment says."""
    monkeypatch.setenv("LDPTEL_WORKERS", "8")
    monkeypatch.setenv("LDPTEL_DASHBOARD_BIND", "127.0.0.1:9998")
    conf = runpy.run_path(str(DEPLOY / "gunicorn-dashboard.conf.py"))
    assert conf["wsgi_app"] == "ldptel.aggregator.dashboard:create_dashboard()"
    assert conf["workers"] == 1 and conf["bind"] == ["127.0.0.1:9998"]
    assert conf["logger_class"] == "ldptel.server.gunicorn_logger.AnonymousLogger"
    assert "%(h)s" not in conf["access_log_format"]


def _unit(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name)
    return parser["Service"]


def _host_nginx_conf(*, ingest_listen: int, ingest: int, dashboard_listen: int, dashboard: int, workdir: Path) -> str:
    """deploy/nginx-host.conf with only its ports and the pid/temp paths substituted."""
    from tests.faults.stack import deploy_nginx_conf

    return deploy_nginx_conf("nginx-host.conf", {
        "listen 8080;": f"listen 127.0.0.1:{ingest_listen};",
        "server 127.0.0.1:8000;": f"server 127.0.0.1:{ingest};",
        "listen 127.0.0.1:8081;": f"listen 127.0.0.1:{dashboard_listen};",
        "server 127.0.0.1:8050;": f"server 127.0.0.1:{dashboard};",
    }, workdir=workdir)


@pytest.mark.slow
def test_host_deploy_serves_an_upload_and_the_dashboard_behind_real_nginx(tmp_path: Path) -> None:
    """The documented host deployment, no Docker: real nginx with deploy/nginx-host.conf (before: `host not found in
    upstream "ingest:8000"`, nginx refused to start) in front of the ingest (gunicorn, deploy/gunicorn.conf.py) and
    the dashboard started with ldptel-dashboard.service's own ExecStart and Environment lines, all on loopback: a
    real batch upload is accepted, and an operator logs in to the dashboard and reads the metric list."""
    import http.client
    import sys
    from urllib.parse import urlencode

    import numpy as np

    from ldptel.storage.embedded import EmbeddedRedis
    from tests.faults.slow import create_metric
    from tests.faults.stack import gunicorn, nginx_binary
    from tests.server.srv_helpers import OCTET, cms_spec, make_batch
    from tests.server.test_server_http import ADMIN_TOKEN, APP_TOKEN, _env, _stop, _wait_http

    binary = nginx_binary()
    ports = {name: _free_port() for name in ("front", "ingest", "dash_front", "dash")}
    service = _unit("ldptel-dashboard.service")
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/ldptel/venv/bin/gunicorn"
    argv = [sys.executable, "-m", "gunicorn", *(a.replace("/opt/ldptel/deploy/", f"{DEPLOY}/") for a in argv[1:])]
    unit_env = dict(line.split("=", 1) for line in service["Environment"].split())
    assert unit_env == {"LDPTEL_DASHBOARD_BIND": "127.0.0.1:8050"}  # what nginx-host.conf's upstream expects
    with EmbeddedRedis(data_dir=tmp_path / "redis") as redis_server:
        env = _env(redis_server.url) | {"LDPTEL_TRUSTED_PROXIES": "127.0.0.1", "LDPTEL_ACCESS_LOG": "-",
                                        "LDPTEL_DASHBOARD_BIND": f"127.0.0.1:{ports['dash']}"}
        dlog = tmp_path / "dashboard.log"
        with dlog.open("wb") as out:
            dashboard = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            _wait_http(ports["dash"], dashboard, dlog)
            with gunicorn(redis_server.url, tmp_path / "ingest.log", port=ports["ingest"], workers=1,
                          extra_env={"LDPTEL_TRUSTED_PROXIES": "127.0.0.1"}):
                workdir = tmp_path / "nginx"
                (workdir / "tmp").mkdir(parents=True)
                conf = workdir / "nginx.conf"
                conf.write_text(_host_nginx_conf(ingest_listen=ports["front"], ingest=ports["ingest"],
                                                 dashboard_listen=ports["dash_front"], dashboard=ports["dash"],
                                                 workdir=workdir))
                nlog = workdir / "nginx.log"
                with nlog.open("wb") as out:
                    front = subprocess.Popen([binary, "-e", "stderr", "-p", str(workdir), "-c", str(conf),
                                              "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT)
                try:
                    _wait_http(ports["front"], front, nlog)  # type: ignore[arg-type]
                    spec = cms_spec("host.deploy")
                    create_metric(ports["front"], spec)
                    body, _ = make_batch(spec, 50, np.random.default_rng(31))
                    conn = http.client.HTTPConnection("127.0.0.1", ports["front"], timeout=20)
                    conn.request("POST", "/v1/reports", body=body,
                                 headers={"Authorization": f"Bearer {APP_TOKEN}", "Content-Type": OCTET})
                    upload = conn.getresponse()
                    answer = json.loads(upload.read())
                    conn.close()
                    assert upload.status == 202 and answer["accepted"] == 50, answer

                    dash = http.client.HTTPConnection("127.0.0.1", ports["dash_front"], timeout=20)
                    dash.request("GET", "/login")
                    page = dash.getresponse()
                    assert page.status == 200 and 'name="token"' in page.read().decode()
                    dash.request("POST", "/login", body=urlencode({"token": ADMIN_TOKEN}),
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
                    logged_in = dash.getresponse()
                    logged_in.read()
                    assert logged_in.status == 303, logged_in.status
                    cookie = logged_in.getheader("Set-Cookie", "").split(";")[0]
                    assert cookie.startswith("ldptel_dashboard=")
                    dash.request("GET", "/api/metrics", headers={"Cookie": cookie})
                    listing = dash.getresponse()
                    text = listing.read().decode()
                    dash.close()
                    assert listing.status == 200 and "host.deploy" in text, text[:500]
                finally:
                    _stop(front)  # type: ignore[arg-type]
        finally:
            _stop(dashboard)
