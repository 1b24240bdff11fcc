"""Settings come from SUMMARIZE_* variables; a bad value is refused naming the variable."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from core.errors import SettingsError
from core.settings import DEFAULT_INSTRUCTION, Settings, redact_url


def test_with_nothing_set_everything_lives_in_the_data_directory(tmp_path):
    settings = Settings.from_env({"HOME": str(tmp_path)})

    assert settings.data_dir == tmp_path / ".local" / "share" / "summarize"
    assert settings.database_url == f"sqlite:///{settings.data_dir.resolve() / 'summarize.db'}"
    assert settings.embedded_broker
    assert settings.model_name == "SmolLM2-135M-Instruct"
    assert settings.profile.name == "throughput"
    assert settings.instruction == DEFAULT_INSTRUCTION
    assert settings.summary_max_tokens == 128


def test_xdg_data_home_moves_the_data_directory(tmp_path):
    assert Settings.from_env({"XDG_DATA_HOME": str(tmp_path)}).data_dir == tmp_path / "summarize"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "SUMMARIZE_MAX_TOKENS",
            "lots",
            "SUMMARIZE_MAX_TOKENS='lots' must be a whole number from 1 to 8192.",
        ),
        (
            "SUMMARIZE_MAX_TOKENS",
            "0",
            "SUMMARIZE_MAX_TOKENS='0' must be a whole number from 1 to 8192.",
        ),
        (
            "SUMMARIZE_PROFILE",
            "fast",
            "SUMMARIZE_PROFILE='fast' must be one of throughput, latency, long-context.",
        ),
        (
            "SUMMARIZE_GPU_MEMORY_UTILIZATION",
            "1.5",
            "SUMMARIZE_GPU_MEMORY_UTILIZATION='1.5' must be a share of memory from 0.05 to 0.98, such as 0.9.",
        ),
        (
            "SUMMARIZE_DATABASE_URL",
            "mysql://x/y",
            "SUMMARIZE_DATABASE_URL='mysql://x/y' must be a SQLAlchemy URL such as",
        ),
        (
            "SUMMARIZE_BROKER_URL",
            "amqp://guest@x//",
            "SUMMARIZE_BROKER_URL='amqp://guest@x//' must be a Redis URL such as",
        ),
        (
            "SUMMARIZE_FLUSH_INTERVAL_S",
            "-1",
            "SUMMARIZE_FLUSH_INTERVAL_S='-1' must be a number of seconds from 0.01 to 60.",
        ),
        ("SUMMARIZE_PROMPT", "   ", "SUMMARIZE_PROMPT='   ' must not be empty."),
        ("SUMMARIZE_QUEUE", "a queue", "SUMMARIZE_QUEUE='a queue' must be a queue name"),
        (
            "SUMMARIZE_DTYPE",
            "bf16",
            "SUMMARIZE_DTYPE='bf16' must be one of auto, bfloat16, float16, float32.",
        ),
    ],
)
def test_a_bad_value_is_refused_with_a_message_naming_the_variable(variable, value, message):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: value})
    assert str(caught.value).startswith(message)


def test_the_prompt_can_come_from_a_file(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Résume en une phrase.\n", encoding="utf-8")
    assert (
        Settings.from_env({"SUMMARIZE_PROMPT_FILE": str(prompt)}).instruction
        == "Résume en une phrase."
    )


def test_a_missing_prompt_file_is_refused_with_the_fix(tmp_path):
    with pytest.raises(SettingsError, match="SUMMARIZE_PROMPT_FILE=.* cannot be read"):
        Settings.from_env({"SUMMARIZE_PROMPT_FILE": str(tmp_path / "nope.txt")})


def test_prompt_and_prompt_file_together_are_refused(tmp_path):
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(SettingsError, match="unset one of them"):
        Settings.from_env(
            {"SUMMARIZE_PROMPT": "a", "SUMMARIZE_PROMPT_FILE": str(tmp_path / "p.txt")}
        )


def test_profile_knobs_can_be_overridden_one_at_a_time():
    settings = Settings.from_env({"SUMMARIZE_PROFILE": "latency", "SUMMARIZE_MAX_NUM_SEQS": "4"})
    assert settings.profile.name == "latency"
    assert settings.profile.max_num_seqs == 4
    assert settings.profile.max_model_len == 2048


def test_a_message_carries_as_many_documents_as_the_engine_runs_at_once_unless_set():
    assert Settings.from_env({}).chunk_size == 256  # throughput
    assert Settings.from_env({"SUMMARIZE_PROFILE": "latency"}).chunk_size == 16
    assert Settings.from_env({"SUMMARIZE_MAX_NUM_SEQS": "4000"}).chunk_size == 1000
    assert Settings.from_env({"SUMMARIZE_CHUNK_DOCS": "64"}).chunk_size == 64


def test_passwords_are_hidden_in_urls():
    assert redact_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redact_url("postgresql://app:pw@db/x") == "postgresql://app:***@db/x"
    assert redact_url("rediss://host:6380/0") == "rediss://host:6380/0"
    assert redact_url("postgresql://db/x?user=app&password=pw&sslmode=require") == (
        "postgresql://db/x?user=app&password=***&sslmode=require"
    )
    assert redact_url("mysql://app:hunter2@db/x") == "mysql://app:***@db/x"


def test_a_refused_url_is_shown_without_its_password():
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SUMMARIZE_DATABASE_URL": "mysql://app:hunter2@db/x"})
    assert "hunter2" not in str(refused.value)
    assert "SUMMARIZE_DATABASE_URL='mysql://app:***@db/x' must be a SQLAlchemy URL" in str(
        refused.value
    )


def test_a_relative_data_directory_is_made_absolute_for_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": "state"})
    assert settings.database_url == f"sqlite:///{(tmp_path / 'state').resolve() / 'summarize.db'}"
    assert settings.data_dir == Path("state")


def test_a_summary_longer_than_the_context_allows_is_refused_naming_both_knobs():
    settings = Settings.from_env(
        {"SUMMARIZE_MAX_TOKENS": "2000", "SUMMARIZE_MAX_MODEL_LEN": "2048"}
    )
    with pytest.raises(SettingsError) as caught:
        _ = settings.profile
    assert str(caught.value) == (
        "Profile 'throughput' cannot run: a summary of 2000 tokens leaves no room for the document "
        "in a 2048-token context: lower SUMMARIZE_MAX_TOKENS or raise SUMMARIZE_MAX_MODEL_LEN."
    )


def test_fewer_batched_tokens_than_sequences_is_refused():
    settings = Settings.from_env({"SUMMARIZE_MAX_NUM_BATCHED_TOKENS": "128"})
    with pytest.raises(
        SettingsError,
        match="raise SUMMARIZE_MAX_NUM_BATCHED_TOKENS or lower SUMMARIZE_MAX_NUM_SEQS",
    ):
        _ = settings.profile


@pytest.mark.parametrize("name", ["throughput", "latency", "long-context"])
def test_every_profile_as_shipped_is_valid(name):
    assert Settings.from_env({"SUMMARIZE_PROFILE": name}).profile.problems() == []


def test_a_tls_broker_is_verified_by_default_on_the_celery_side_too():
    from core import broker, transport

    def tls(url: str) -> Settings:
        return Settings.from_env({"SUMMARIZE_BROKER_URL": url})

    plain = transport.celery_config(
        tls("rediss://:pw@redis.example.com:6380/0?ssl_ca_certs=/ca.pem")
    )
    assert plain["broker_use_ssl"] == {
        "ssl_ca_certs": "/ca.pem",
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    assert broker.unchecked_certificates(tls("rediss://redis.example.com:6380/0")) is None

    off = tls("rediss://redis.example.com:6380/0?ssl_cert_reqs=none")
    assert "broker_use_ssl" not in transport.celery_config(off)  # the URL said so: kombu reads it
    assert "ssl_cert_reqs=none in SUMMARIZE_BROKER_URL: the Redis server's certificate is not " in (
        broker.unchecked_certificates(off)
    )
    assert "broker_use_ssl" not in transport.celery_config(tls("redis://redis.example.com:6379/0"))


def test_the_broker_url_example_for_tls_names_a_ca_not_a_bare_rediss():
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SUMMARIZE_BROKER_URL": "amqp://x"})
    assert "rediss://:password@host:6380/0?ssl_ca_certs=/path/to/ca.pem" in str(refused.value)


def test_the_sentence_limit_goes_with_the_default_instruction_unless_set():
    default = Settings.from_env({})
    own = Settings.from_env({"SUMMARIZE_PROMPT": "List the key points as bullets."})
    asked = Settings.from_env({"SUMMARIZE_PROMPT": "Bullets.", "SUMMARIZE_MAX_SENTENCES": "5"})
    off = Settings.from_env({"SUMMARIZE_MAX_SENTENCES": "0"})

    assert default.sentences_for(default.instruction) == 3
    assert own.sentences_for(own.instruction) is None
    assert asked.sentences_for(asked.instruction) == 5
    assert off.sentences_for(off.instruction) is None
