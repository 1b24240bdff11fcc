"""Every command explains itself: --help with an example, errors without tracebacks."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from summarize.cli import main


def _commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


@pytest.mark.parametrize(
    ("path", "command"),
    list(_commands(main)),
    ids=lambda p: " ".join(p) if isinstance(p, tuple) else "",
)
def test_every_command_has_help_with_an_example(path, command):
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert command.help and len(command.help.split()) >= 4
    if not isinstance(command, click.Group):
        assert re.search(r"Example:\n\s+(\S+=\S+ )*summarize ", result.output), result.output


def test_a_bad_setting_is_an_error_line_not_a_traceback(tmp_path):
    result = CliRunner().invoke(main, ["status"], env={"SUMMARIZE_MAX_TOKENS": "many"})
    assert result.exit_code == 1
    assert (
        result.output
        == "Error: SUMMARIZE_MAX_TOKENS='many' must be a whole number from 1 to 8192.\n"
    )


def test_the_producer_side_imports_neither_vllm_nor_torch_nor_celery():
    """What keeps `submit` and `status` quick to start (`python scripts/bench --modes startup` times it)."""
    code = "import sys, summarize.cli, jobs.submit, readers.status; print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', 'celery')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_model_neither_here_nor_on_the_hub_ends_the_worker_with_the_fix_not_a_traceback(env):
    missing = "summarize-tests/no-such-model-0"
    done = subprocess.run(
        [sys.executable, "-m", "summarize.cli", "worker", "--burst"],
        env=os.environ | env | {"SUMMARIZE_MODEL": missing},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"Error: SUMMARIZE_MODEL='{missing}' is not a model folder, not in the Hugging Face" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr + done.stdout
