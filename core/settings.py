"""All settings, read once from SUMMARIZE_* environment variables.

Defaults work on a laptop with nothing installed: a SQLite file and an embedded
Redis server in the data directory, and the bundled SmolLM2 model. A value we
cannot use is refused with a message that names the variable.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import quote, urlsplit

from core.errors import SettingsError
from core.files import read_named
from core.profiles import DEFAULT_PROFILE, PROFILES, Profile, with_overrides

DEFAULT_INSTRUCTION = (
    "Summarize the document below in two or three sentences. "
    "State its main facts plainly and add nothing that is not in it."
)
MAX_SUMMARY_TOKENS = 8192  # the longest summary anyone may ask for (env, --max-tokens, records)
DEFAULT_SENTENCES = 3  # the default instruction's "two or three sentences", enforced
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
MAX_CHUNK_DOCS = 1000  # the most documents one queue message may carry


def _default_data_dir(env: Mapping[str, str]) -> Path:
    home = env.get("HOME") or str(Path.home())
    base = env.get("XDG_DATA_HOME") or str(Path(home) / ".local" / "share")
    return Path(base) / "summarize"


def _ranged(convert: Callable[[str], float], low: float, high: float, what: str):
    """A parser for a number within bounds, whose error says which numbers are allowed."""
    allowed = f"must be {what} from {_plain(low)} to {_plain(high)}"

    def parse(raw: str):
        try:
            value = convert(raw.replace("_", ""))
        except ValueError:
            raise ValueError(allowed) from None
        if not low <= value <= high:
            raise ValueError(allowed)
        return value

    return parse


def _plain(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def _whole(low: int, high: int) -> Callable[[str], int]:
    return _ranged(int, low, high, "a whole number")


def _seconds(low: float, high: float) -> Callable[[str], float]:
    return _ranged(float, low, high, "a number of seconds")


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _share(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a share of memory between 0 and 1, such as 0.9") from None
    if not 0.05 <= value <= 0.98:
        raise ValueError("must be a share of memory from 0.05 to 0.98, such as 0.9")
    return value


def _one_of(choices: Iterable[str]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw

    return parse


DTYPES = ("auto", "bfloat16", "float16", "float32")
PRIORITY_NAMES = ("high", "normal", "low")  # a batch's priority, the most urgent first


def _database_url(raw: str) -> str:
    scheme = urlsplit(raw).scheme
    if not scheme.startswith(("sqlite", "postgresql")):
        raise ValueError(
            "must be a SQLAlchemy URL such as sqlite:////var/lib/summarize/summarize.db "
            "or postgresql://user@host/dbname"
        )
    return raw


def _broker_url(raw: str) -> str:
    if urlsplit(raw).scheme not in ("redis", "rediss", "redis+socket", "unix"):
        raise ValueError(
            "must be a Redis URL such as redis://:password@host:6379/0, or for TLS "
            "rediss://:password@host:6380/0?ssl_ca_certs=/path/to/ca.pem; "
            "unset it to use the embedded Redis"
        )
    return raw


def _flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError("must be 1 or 0 (or true/false, yes/no, on/off)")
    return value in ("1", "true", "yes", "on")


def _text(raw: str) -> str:
    if not raw.strip():
        raise ValueError("must not be empty")
    return raw.strip()


def _storage_options(raw: str) -> dict[str, dict]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in value.items()
    ):
        raise ValueError(
            "must be a JSON object of each protocol's fsspec options, such as "
            '{"s3": {"endpoint_url": "http://127.0.0.1:9000"}}'
        )
    return {protocol.lower(): options for protocol, options in value.items()}


def parse_notify_url(raw: str) -> str:
    """A notice's URL, checked (SUMMARIZE_NOTIFY_URL, submit --notify, the API's metadata)."""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(raw) > 2000:
        raise ValueError("must be an http:// or https:// URL (at most 2,000 characters)")
    return raw


def _notify_secret(raw: str) -> str:
    if not raw.startswith("whsec_") or len(base64.b64decode(raw[6:] + "==", validate=False)) < 24:
        raise ValueError("must be whsec_ and base64 (24 bytes or more): `summarize keys secret`")
    return raw


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


def _queue(raw: str) -> str:
    if not raw or not raw.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError("must be a queue name of letters, digits, '-', '_' and '.'")
    return raw


@dataclass(frozen=True)
class Settings:
    """The settings of one `summarize` process. Build it with `Settings.from_env()`."""

    data_dir: Path = field(metadata={"env": "DATA_DIR", "parse": _path})
    database_url: str = field(metadata={"env": "DATABASE_URL", "parse": _database_url})
    broker_url: str | None = field(
        default=None, metadata={"env": "BROKER_URL", "parse": _broker_url}
    )
    model: str | None = field(default=None, metadata={"env": "MODEL", "parse": _text})
    profile_name: str = field(
        default=DEFAULT_PROFILE, metadata={"env": "PROFILE", "parse": _one_of(PROFILES)}
    )
    instruction: str = field(
        default=DEFAULT_INSTRUCTION, metadata={"env": "PROMPT", "parse": _text}
    )
    max_tokens: int | None = field(
        default=None, metadata={"env": "MAX_TOKENS", "parse": _whole(1, MAX_SUMMARY_TOKENS)}
    )
    max_sentences: int | None = field(
        default=None, metadata={"env": "MAX_SENTENCES", "parse": _whole(0, 1000)}
    )  # a summary ends after this many sentences (worker/sentences.py); 0: no limit
    max_doc_bytes: int = field(
        default=1_000_000, metadata={"env": "MAX_DOC_BYTES", "parse": _whole(1, 1 << 30)}
    )
    keep_texts: bool = field(default=False, metadata={"env": "KEEP_TEXTS", "parse": _flag})
    storage_options: dict = field(
        default_factory=dict,
        hash=False,  # a dict; settings are hashed as a cache key (core/producer.py)
        metadata={"env": "STORAGE_OPTIONS", "parse": _storage_options, "secret": True},
    )  # handed to fsspec for URLs a corpus is read from or results written to (jobs/objects.py)
    extract_processes: int = field(
        default_factory=_cores,
        metadata={"env": "EXTRACT_PROCESSES", "parse": _whole(1, 256)},
    )  # processes taking text out of pages, PDFs and Word files at submit (jobs/extraction.py)
    extract_timeout_s: float = field(
        default=30.0, metadata={"env": "EXTRACT_TIMEOUT_S", "parse": _seconds(1, 3600)}
    )  # a file whose text takes longer is a failed row
    extract_memory_mb: int = field(
        default=512, metadata={"env": "EXTRACT_MEMORY_MB", "parse": _whole(64, 1 << 20)}
    )  # ... and one that needs more memory than this
    queue: str = field(default="summarize", metadata={"env": "QUEUE", "parse": _queue})
    flush_interval_s: float = field(
        default=1.0, metadata={"env": "FLUSH_INTERVAL_S", "parse": _seconds(0.01, 60)}
    )
    max_attempts: int = field(default=3, metadata={"env": "MAX_ATTEMPTS", "parse": _whole(1, 100)})
    visibility_timeout_s: float = field(
        default=60.0, metadata={"env": "VISIBILITY_TIMEOUT_S", "parse": _seconds(10, 86400)}
    )
    stop_grace_s: float = field(
        default=20.0, metadata={"env": "STOP_GRACE_S", "parse": _seconds(0, 3600)}
    )
    chunk_docs: int | None = field(
        default=None, metadata={"env": "CHUNK_DOCS", "parse": _whole(1, MAX_CHUNK_DOCS)}
    )  # unset: the profile's max_num_seqs (`chunk_size`)
    in_flight: int | None = field(
        default=None, metadata={"env": "IN_FLIGHT", "parse": _whole(1, 100_000)}
    )
    max_num_seqs: int | None = field(
        default=None, metadata={"env": "MAX_NUM_SEQS", "parse": _whole(1, 65536)}
    )
    max_model_len: int | None = field(
        default=None, metadata={"env": "MAX_MODEL_LEN", "parse": _whole(64, 1 << 20)}
    )
    max_num_batched_tokens: int | None = field(
        default=None, metadata={"env": "MAX_NUM_BATCHED_TOKENS", "parse": _whole(64, 1 << 22)}
    )
    tensor_parallel_size: int = field(
        default=1, metadata={"env": "TENSOR_PARALLEL_SIZE", "parse": _whole(1, 64)}
    )
    dtype: str = field(
        default="auto", metadata={"env": "DTYPE", "parse": _one_of(DTYPES)}
    )  # auto: the model's own, float32 on a CPU without bfloat16 arithmetic (worker/engine.py)
    gpu_memory_utilization: float | None = field(
        default=None, metadata={"env": "GPU_MEMORY_UTILIZATION", "parse": _share}
    )
    metrics_port: int | None = field(
        default=None, metadata={"env": "METRICS_PORT", "parse": _whole(1, 65535)}
    )  # the worker serves Prometheus metrics here (worker/metrics.py); unset: none
    metrics_host: str = field(
        default="127.0.0.1", metadata={"env": "METRICS_HOST", "parse": _text}
    )  # 0.0.0.0 to let a Prometheus in another container scrape it
    api_max_file_mb: int = field(
        default=200, metadata={"env": "API_MAX_FILE_MB", "parse": _whole(1, 1 << 20)}
    )  # the largest batch input file `summarize serve` takes (api/files.py), as OpenAI's
    priority: str = field(
        default="normal", metadata={"env": "PRIORITY", "parse": _one_of(PRIORITY_NAMES)}
    )
    notify_url: str | None = field(
        default=None, metadata={"env": "NOTIFY_URL", "parse": parse_notify_url}
    )  # where every batch says that it ended, unless `submit --notify` names another
    notify_secret: str | None = field(
        default=None, metadata={"env": "NOTIFY_SECRET", "parse": _notify_secret, "secret": True}
    )  # signs the notices workers send (core/notices.py); receivers verify with it

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read SUMMARIZE_* variables; refuse a bad value naming the variable and the fix."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            name = "SUMMARIZE_" + f.metadata["env"]
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            try:
                values[f.name] = f.metadata["parse"](raw)
            except ValueError as exc:
                if f.metadata.get("secret"):
                    raise SettingsError(f"{name} (not shown: it may hold secrets) {exc}.") from None
                shown = redact_url(raw) if name.endswith("_URL") else raw
                raise SettingsError(f"{name}={shown!r} {exc}.") from None
        prompt_file = env.get("SUMMARIZE_PROMPT_FILE")
        if prompt_file:
            if "instruction" in values:
                raise SettingsError(
                    "SUMMARIZE_PROMPT and SUMMARIZE_PROMPT_FILE are both set: unset one of them."
                )
            values["instruction"] = read_prompt_file(Path(prompt_file).expanduser())
        data_dir = values.setdefault("data_dir", _default_data_dir(env))
        values.setdefault("database_url", _sqlite_url(Path(data_dir).resolve() / "summarize.db"))
        return cls(**values)

    @classmethod
    def for_command(cls, ctx) -> Settings:
        """The settings of one CLI invocation (a click context): read once, shared by its commands."""
        return ctx.ensure_object(dict).setdefault("settings", cls.from_env())

    @property
    def profile(self) -> Profile:
        """The serving profile with this process's explicit overrides applied."""
        profile = with_overrides(
            PROFILES[self.profile_name],
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
            gpu_memory_utilization=self.gpu_memory_utilization,
            cpu_memory_utilization=self.gpu_memory_utilization,
            max_tokens=self.max_tokens,
        )
        problems = profile.problems()
        if problems:
            raise SettingsError(
                f"Profile {profile.name!r} cannot run: " + "; ".join(problems) + "."
            )
        return profile

    def sentences_for(self, instruction: str) -> int | None:
        """The sentence limit a summary under `instruction` gets (None: none). Unless
        SUMMARIZE_MAX_SENTENCES says otherwise, the default instruction, which asks for two
        or three sentences, gets DEFAULT_SENTENCES and any other instruction none: bullet
        points or a JSON answer must not be cut after three full stops."""
        if self.max_sentences is not None:
            return self.max_sentences or None  # SUMMARIZE_MAX_SENTENCES=0: no limit
        return DEFAULT_SENTENCES if instruction == DEFAULT_INSTRUCTION else None

    @property
    def chunk_size(self) -> int:
        """Documents one queue message carries: SUMMARIZE_CHUNK_DOCS, or as many as the
        profile's engine runs at once (256 for throughput), so a worker's two messages fill
        its `in_flight` window. Each message's trip through Celery costs the worker more than
        its documents' writes do (the ceiling figures in docs/performance.md), so larger is faster."""
        return self.chunk_docs or min(self.profile.max_num_seqs, MAX_CHUNK_DOCS)

    @property
    def summary_max_tokens(self) -> int:
        return self.profile.max_tokens

    @property
    def model_name(self) -> str:
        """The model as recorded in `results.model`: stable across machines for the default."""
        return self.model or DEFAULT_MODEL_NAME

    @property
    def default_model_dir(self) -> Path:
        return self.data_dir / "models" / DEFAULT_MODEL_NAME

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url is None

    @property
    def broker_socket(self) -> Path:
        """The embedded Redis server's unix socket."""
        return self.data_dir / "redis" / "redis.sock"

    def with_changes(self, **changes: object) -> Settings:
        """A copy with some values replaced, as CLI options do."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in changes.items() if v is not None})
        return Settings(**values)


def _sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file, its path escaped (a `?` or `#` in it stays a path)."""
    escaped = quote(str(path), safe="/ +@:~")
    return f"sqlite:///{escaped}"


def read_prompt_file(path: Path, source: str = "SUMMARIZE_PROMPT_FILE") -> str:
    """The instruction in a UTF-8 text file; `source` names where the path came from."""
    text = read_named(path, source, "the instruction")
    if not text.strip():
        raise SettingsError(f"{source}={str(path)!r} is empty: write an instruction.")
    return text.strip()


_SECRET_PARAMS = {"password", "passwd", "pwd", "secret", "token", "sslpassword"}
NOT_A_URL = "(not shown: it is not a URL)"


def redact_url(url: str) -> str:
    """The URL with any password (in its user part or its query) replaced by ***, for logs,
    errors and status output. A password may hold `/`, `?`, `#` or `@` (the database's and
    Redis's own parsers allow them): the user part runs to the last `@`, and all of it after
    the first `:` is hidden. Of text that is not a URL, nothing is shown."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or any(c.isspace() for c in scheme):
        return NOT_A_URL
    at = rest.rfind("@")
    if at != -1:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:***{rest[at:]}"
    where, question, query = rest.partition("?")
    if question:
        pairs = [
            f"{key}=***" if key.lower() in _SECRET_PARAMS else pair
            for pair in query.split("&")
            for key in [pair.split("=", 1)[0]]
        ]
        rest = f"{where}?{'&'.join(pairs)}"
    return f"{scheme}://{rest}"
