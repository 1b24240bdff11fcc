"""The embedded Redis: started on demand, shared, stopped when idle, and nothing queued is lost."""

from __future__ import annotations

import os
import tempfile

import pytest
from click.testing import CliRunner

from core import broker
from core.settings import Settings
from summarize.cli import main
from tests.helpers import write
from tests.stack import cli


@pytest.fixture
def embedded(tmp_path):
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path / "data")})
    yield settings
    broker.EmbeddedRedis(settings).stop()


def alive(pid: int | None) -> bool:
    return pid is not None and broker._running(pid)


def test_the_embedded_server_starts_on_demand_and_stops_when_the_last_user_leaves(embedded):
    server = broker.EmbeddedRedis(embedded)
    with broker.session(embedded) as first:
        pid = server.pid()
        assert alive(pid)
        with broker.session(embedded) as second:  # a second process shares the same server
            assert server.pid() == pid
            second.lpush("q", "m")
        assert alive(pid)  # the first user is still connected
        assert first.llen("q") == 1
    assert not alive(pid)
    assert not server.socket.exists()


def test_what_was_queued_survives_the_embedded_server_stopping(embedded):
    with broker.session(embedded) as client:
        client.lpush("q", "a", "b")
    with broker.session(embedded) as client:
        assert client.lrange("q", 0, -1) == [b"b", b"a"]


def test_the_embedded_server_is_private_to_its_owner_and_persists_to_disk(embedded):
    with broker.session(embedded) as client:
        config = client.config_get("*")
        assert config["appendonly"] == "yes"
        assert config["maxmemory-policy"] == "noeviction"
        assert config["port"] == "0"
        assert oct(broker.socket_path(embedded).stat().st_mode & 0o777) == "0o700"


def test_submit_with_no_settings_uses_sqlite_and_the_embedded_redis(embedded, tmp_path):
    write(tmp_path / "in", "a.txt", "Some text.")
    env = {"SUMMARIZE_DATA_DIR": str(embedded.data_dir)}

    result = CliRunner().invoke(main, ["submit", str(tmp_path / "in"), "--batch", "b"], env=env)

    assert result.exit_code == 0, result.output
    assert f"sqlite:///{embedded.data_dir.resolve()}/summarize.db" in result.output
    with broker.session(embedded) as client:
        assert client.llen("summarize") == 1


def test_a_long_data_directory_path_still_gets_a_working_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(deep)})
    try:
        with broker.session(settings) as client:
            assert client.ping()
        socket = broker.socket_path(settings)
        assert len(str(socket)) <= 100
        assert socket.parent.name == f"summarize-{os.getuid()}"  # not a name anyone can guess
        assert socket.parent.stat().st_mode & 0o777 == 0o700
    finally:
        broker.EmbeddedRedis(settings).stop()


def test_a_socket_folder_others_can_enter_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / f"summarize-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(tmp_path / f"summarize-{os.getuid()}", 0o777)  # made by someone else, say
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path / ("d" * 60) / ("e" * 60))})
    with pytest.raises(broker.BrokerUnavailable, match="is open to others: remove it"):
        broker.socket_path(settings)


def test_an_embedded_server_that_cannot_start_says_where_its_log_is(tmp_path, monkeypatch):
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path / "data")})
    monkeypatch.setattr(broker, "redis_server_binary", lambda: "/nonexistent/redis-server")
    with pytest.raises(broker.BrokerUnavailable, match="redis.log, or set SUMMARIZE_BROKER_URL"):
        broker.connect(settings)


def test_summarize_run_leaves_no_embedded_server_behind(embedded, tmp_path):
    """`summarize run` leaves by os._exit, past its sessions' ends: it shuts the server it
    started itself, as every other command does."""
    write(tmp_path / "in", "a.txt", "The council met on Monday. It voted on the budget.")
    env = {"SUMMARIZE_DATA_DIR": str(embedded.data_dir), "SUMMARIZE_MODEL": "echo"}
    env = {k: v for k, v in (os.environ | env).items() if k != "SUMMARIZE_BROKER_URL"}

    done = cli(env, "run", str(tmp_path / "in"), "--batch", "b", timeout_s=120)

    assert done.returncode == 0, done.stderr[-2000:]
    assert not broker.EmbeddedRedis(embedded).socket.exists()
