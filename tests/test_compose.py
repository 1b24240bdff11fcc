"""docker-compose.yml: valid, complete, and holding what a production deployment needs.

`docker-compose config` (Debian's Python docker-compose 1.29) checks and renders the file
without a Docker engine; CI installs it, so these tests never skip for want of it. When the
Compose plugin (`docker compose`) is installed as well, the file must pass it too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
pytestmark = pytest.mark.compose
ENV_EXAMPLE = ROOT / ".env.example"
DOCS = ROOT / "docs" / "deploy.md"
README = ROOT / "README.md"
SECTION = "## Running with docker compose"

SERVICES = {"redis", "postgres", "migrate", "model", "worker", "flower", "prometheus", "grafana"}
SECRETS = ["REDIS_PASSWORD", "POSTGRES_PASSWORD", "DASHBOARDS_PASSWORD", "GRAFANA_ADMIN_PASSWORD"]
COMPLETED = {"condition": "service_completed_successfully"}
HEALTHY = {"condition": "service_healthy"}


def docker_compose() -> list[str]:
    path = shutil.which("docker-compose")
    if path is None:
        pytest.fail(
            "docker-compose is not installed: apt-get install docker-compose (.ci/run does)"
        )
    return [path]


def compose_plugin() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    found = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60)
    return [docker, "compose"] if found.returncode == 0 else None


def render(tool: list[str], env_file: Path, *extra_files: Path) -> subprocess.CompletedProcess[str]:
    """`config` with only the env file's values: the caller's environment must not fill gaps."""
    files = [arg for f in (COMPOSE_FILE, *extra_files) for arg in ("-f", str(f))]
    command = [*tool, "--project-directory", str(ROOT), "--env-file", str(env_file), *files]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(env_file.parent)}
    return subprocess.run(
        [*command, "config"], capture_output=True, text=True, env=env, timeout=120
    )


def rendered(tool: list[str], env_file: Path, *extra_files: Path) -> dict:
    done = render(tool, env_file, *extra_files)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    """`.env.example` copied to a temporary `.env` with its passwords filled in, as an operator
    starts."""
    path = tmp_path / ".env"
    shutil.copy(ENV_EXAMPLE, path)
    for name in SECRETS:
        set_variable(path, name, "change-me")
    return path


@pytest.fixture
def config(env_file: Path) -> dict:
    return rendered(docker_compose(), env_file)


def set_variable(env_file: Path, name: str, value: str) -> None:
    lines = [line for line in env_file.read_text().splitlines() if not line.startswith(name + "=")]
    env_file.write_text("\n".join([*lines, f"{name}={value}", ""]))


def seconds(duration: str | int | float) -> float:
    """A Compose duration ("60s", "1m30s", "90") in seconds."""
    if isinstance(duration, int | float) or str(duration).isdigit():
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration)
    assert "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


def section(text: str, heading: str) -> str | None:
    """The Markdown section under `heading`, up to the next heading of the same level."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    return "\n".join(lines[start + 1 : end])


def table_services(text: str) -> list[str]:
    """Service names from the rows of a `| service | what it does |` table."""
    return re.findall(r"^\|\s*`([\w.-]+)`\s*\|", text, flags=re.MULTILINE)


# -- the file is valid ------------------------------------------------------------------------


def test_docker_compose_refuses_env_example_until_its_passwords_are_filled_in(tmp_path):
    path = tmp_path / ".env"
    shutil.copy(ENV_EXAMPLE, path)

    done = render(docker_compose(), path)

    assert done.returncode != 0
    assert "set REDIS_PASSWORD in .env (see .env.example)" in done.stderr
    assert "change-me" not in ENV_EXAMPLE.read_text()


def test_docker_compose_accepts_the_file_with_env_example(env_file):
    config = rendered(docker_compose(), env_file)

    assert set(config["services"]) == SERVICES
    plugin = compose_plugin()  # where the Compose plugin is installed, it must agree
    if plugin is not None:
        config = rendered(plugin, env_file)
        assert set(config["services"]) == SERVICES
        devices = config["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
        assert [d["driver"] for d in devices] == ["nvidia"]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_missing_secret_is_refused_with_its_name(env_file, secret):
    set_variable(env_file, secret, "")

    done = render(docker_compose(), env_file)

    assert done.returncode != 0
    assert f"set {secret} in .env" in done.stderr


# -- what production needs --------------------------------------------------------------------


def test_redis_keeps_every_message_and_wants_a_password(config):
    redis = config["services"]["redis"]
    command = " ".join(redis["command"])

    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert "--requirepass change-me" in command
    healthcheck = " ".join(redis["healthcheck"]["test"])
    assert "redis-cli" in healthcheck and " ping" in healthcheck
    assert "REDISCLI_AUTH=" in healthcheck and " -a " not in healthcheck  # not visible in `ps`
    assert "redis:/data:rw" in redis["volumes"]
    assert redis["restart"] == "unless-stopped"


def test_postgres_has_a_healthcheck_a_volume_and_the_init_scripts(config):
    postgres = config["services"]["postgres"]

    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert "postgres:/var/lib/postgresql/data:rw" in postgres["volumes"]
    assert f"{ROOT}/deploy/postgres/init:/docker-entrypoint-initdb.d:ro" in postgres["volumes"]
    assert postgres["environment"] == {
        "POSTGRES_DB": "summarize",
        "POSTGRES_USER": "summarize",
        "POSTGRES_PASSWORD": "change-me",
        "DASHBOARDS_PASSWORD": "change-me",
    }
    assert set(config["volumes"]) == {"data", "redis", "postgres", "grafana", "prometheus"}


def test_migrate_runs_once_after_postgres_is_healthy_and_the_rest_waits_for_it(config):
    services = config["services"]

    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"] == {"postgres": HEALTHY}
    assert "restart" not in services["migrate"]
    assert services["worker"]["depends_on"]["migrate"] == COMPLETED
    assert services["grafana"]["depends_on"]["migrate"] == COMPLETED


def test_the_model_service_fetches_the_default_model_only_when_none_is_set(config):
    model = config["services"]["model"]
    script = " ".join(model["entrypoint"] + model["command"])

    assert script.startswith('sh -c if [ -n "$$SUMMARIZE_MODEL" ]')
    assert "else exec summarize model fetch" in script
    assert "data:/data:rw" in model["volumes"]
    assert config["services"]["worker"]["depends_on"]["model"] == COMPLETED


def test_the_worker_reserves_an_nvidia_gpu_and_stops_gracefully(config):
    worker = config["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    grace_s = float(worker["environment"]["SUMMARIZE_STOP_GRACE_S"])

    assert devices == [{"driver": "nvidia", "count": "1", "capabilities": ["gpu"]}]
    assert worker["command"] == ["worker"]
    assert worker["restart"] == "unless-stopped"
    assert worker["depends_on"] == {"migrate": COMPLETED, "model": COMPLETED, "redis": HEALTHY}
    assert grace_s == 20
    assert seconds(worker["stop_grace_period"]) >= grace_s + 30
    assert worker["init"] is True
    assert "data:/data:rw" in worker["volumes"]


def test_the_worker_takes_its_urls_and_model_from_env(env_file):
    set_variable(env_file, "POSTGRES_PASSWORD", "pg0secret")
    set_variable(env_file, "REDIS_PASSWORD", "redis0secret")
    set_variable(env_file, "SUMMARIZE_MODEL", "Qwen/Qwen2.5-1.5B-Instruct")
    set_variable(env_file, "WORKER_GPUS", "all")

    worker = rendered(docker_compose(), env_file)["services"]["worker"]

    assert worker["environment"]["SUMMARIZE_DATABASE_URL"] == (
        "postgresql://summarize:pg0secret@postgres:5432/summarize"
    )
    assert worker["environment"]["SUMMARIZE_BROKER_URL"] == "redis://:redis0secret@redis:6379/0"
    assert worker["environment"]["SUMMARIZE_MODEL"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert worker["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "all"


def test_flower_and_grafana_listen_on_localhost_only(config):
    flower = config["services"]["flower"]
    grafana = config["services"]["grafana"]

    assert flower["entrypoint"] == ["celery"]
    assert flower["command"] == ["flower", "--port=5555"]  # no password on the command line
    assert flower["environment"]["CELERY_BROKER_URL"] == "redis://:change-me@redis:6379/0"
    assert flower["ports"] == ["127.0.0.1:5555:5555/tcp"]
    assert grafana["ports"] == ["127.0.0.1:3000:3000/tcp"]
    assert grafana["image"].startswith("grafana/grafana:")
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "change-me"
    assert grafana["environment"]["DASHBOARDS_PASSWORD"] == "change-me"
    assert f"{ROOT}/deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert f"{ROOT}/deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    assert all(
        not port.startswith(("0.0.0.0", "[::]")) and port.count(":") >= 2
        for service in config["services"].values()
        for port in service.get("ports", [])
    )


def test_prometheus_scrapes_the_workers_metrics_and_grafana_reads_it(config):
    prometheus = config["services"]["prometheus"]
    worker = config["services"]["worker"]
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())

    assert prometheus["image"].startswith("prom/prometheus:")
    assert prometheus["ports"] == ["127.0.0.1:9090:9090/tcp"]
    assert (
        f"{ROOT}/deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
        in (prometheus["volumes"])
    )
    assert "--storage.tsdb.retention.time=30d" in prometheus["command"]
    port = worker["environment"]["SUMMARIZE_METRICS_PORT"]
    assert worker["environment"]["SUMMARIZE_METRICS_HOST"] == "0.0.0.0"  # the compose network
    (job,) = scrape["scrape_configs"]
    assert job["static_configs"] == [{"targets": [f"worker:{port}"]}]
    assert config["services"]["grafana"]["depends_on"]["prometheus"] == {
        "condition": "service_started"
    }


# -- secrets and their documentation ----------------------------------------------------------


def test_every_variable_the_file_reads_is_in_env_example_with_a_comment():
    used = set(re.findall(r"\$\{(\w+)", COMPOSE_FILE.read_text()))
    lines = ENV_EXAMPLE.read_text().splitlines()
    documented = {
        line.split("=", 1)[0]: lines[i - 1]
        for i, line in enumerate(lines)
        if re.match(r"^\w+=", line)
    }

    assert used == set(documented)
    assert [name for name, above in documented.items() if not above.startswith("# ")] == []
    assert set(SECRETS) <= used


def test_secrets_come_only_from_env():
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    for service in raw["services"].values():
        environment = service.get("environment", {})
        for name, value in environment.items():
            if "PASSWORD" in name or "TOKEN" in name:
                assert str(value).startswith("${"), name
    assert re.search(r"^\.env$", (ROOT / ".gitignore").read_text(), flags=re.MULTILINE)
    assert re.search(r"^\.env$", (ROOT / ".dockerignore").read_text(), flags=re.MULTILINE)


def test_the_image_runs_summarize_as_a_user_with_data_in_a_volume():
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line[:1].isupper()]
    last = {keyword: rest.strip() for keyword, rest in instructions}

    assert last["FROM"].startswith("python:3.11")
    assert "scripts/install gpu" in dockerfile
    assert '"flower' in dockerfile
    assert last["USER"] not in ("root", "0")
    assert last["ENTRYPOINT"] == '["summarize"]'
    assert "SUMMARIZE_DATA_DIR=/data" in dockerfile
    assert last["VOLUME"] == '["/data"]'
    # pyproject.toml alone comes first, so the dependencies layer survives code changes
    copies = [rest for keyword, rest in instructions if keyword == "COPY"]
    assert copies == ["pyproject.toml ./", ". ."]


# -- the documentation names what the file has ------------------------------------------------


def test_every_service_the_docs_and_readme_name_exists():
    documented = table_services(section(DOCS.read_text(), SECTION) or "")
    readme_section = section(README.read_text(), SECTION)
    in_readme = table_services(readme_section) if readme_section is not None else []
    services = set(yaml.safe_load(COMPOSE_FILE.read_text())["services"])

    assert set(documented) == services, "docs/deploy.md's table lists every service"
    assert set(in_readme) <= services
    if readme_section is not None:
        assert in_readme, f"README's {SECTION!r} section has a table of services"


def test_the_one_worker_per_gpu_example_in_the_docs_works(env_file, tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    override = next(b for b in blocks if b.startswith("# docker-compose.override.yml"))
    path = tmp_path / "docker-compose.override.yml"
    path.write_text(override)

    services = rendered(docker_compose(), env_file, path)["services"]
    second, first = services["worker-gpu1"], services["worker"]
    devices = second["deploy"]["resources"]["reservations"]["devices"]

    assert devices == [{"driver": "nvidia", "device_ids": ["1"], "capabilities": ["gpu"]}]
    for key in (
        "image",
        "init",
        "command",
        "environment",
        "volumes",
        "depends_on",
        "restart",
        "stop_grace_period",
        "shm_size",
    ):
        assert second[key] == first[key], key
