"""The documentation is part of the interface: the README stays a first page, its command
table says what the command line has, the configuration page has every setting, and every
link and path the docs give leads somewhere."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import click
import pytest

from core.settings import Settings
from summarize.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MOST_LINES = 250  # a newcomer reads it in five minutes; the reference is in docs/

COMMAND_TABLE_HEADER = "| command | what it does |"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# A path into the checkout, as the docs write one: `core/tables.py`, `samples/schemas/`,
# `core/prompt.result_key` (a module and a name in it).
FOLDERS = ("summarize", "jobs", "worker", "readers", "core", "migrations", "scripts", "tests")
FOLDERS += ("deploy", "samples", "constraints")
REPOSITORY_PATH = re.compile(rf"`((?:{'|'.join(FOLDERS)})/[\w./-]*)`")


# -- reading Markdown ---------------------------------------------------------------------------


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, backticks and other punctuation
    dropped (but `-` and `_`), each space a `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets `-1`, `-2`, … as on GitHub."""
    found: set[str] = set()
    for line in prose(page.read_text()):
        if match := HEADING.match(line):
            base = anchor = slug(match.group(1))
            repeat = 0
            while anchor in found:
                repeat += 1
                anchor = f"{base}-{repeat}"
            found.add(anchor)
    return found


def relative_links(page: Path) -> list[str]:
    """The targets of a page's links that lead into the checkout (not http(s), not code); a
    link's words may run over a line break."""
    text = INLINE_CODE.sub("", "\n".join(prose(page.read_text())))
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:"))]


def broken(page: Path, target: str) -> str | None:
    """Why a link from `page` leads nowhere; None when it leads to a file (and heading)."""
    path, _, anchor = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    if not linked.exists():
        return f"{target}: no file {linked.relative_to(ROOT)}"
    if anchor and anchor not in anchors(linked):
        return f"{target}: {linked.relative_to(ROOT)} has no heading whose anchor is #{anchor}"
    return None


# -- the command line ---------------------------------------------------------------------------


def cli_commands(group: click.Group = main, path: tuple[str, ...] = ()) -> dict:
    """Every command of the `summarize` group by its path (`("db", "upgrade")`), through
    its subgroups."""
    found = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= cli_commands(command, (*path, name))
        else:
            found[(*path, name)] = command
    return found


def long_options(command: click.Command) -> list[str]:
    return [
        option
        for param in command.params
        if isinstance(param, click.Option)
        for option in (*param.opts, *param.secondary_opts)
        if option.startswith("--") and option != "--help"
    ]


def command_rows() -> dict[tuple[str, ...], str]:
    """The first cell of each row of the README's command table, by the command it names:
    the words after `summarize` up to the first that is not a command's name. Rows of
    `scripts/` are not `summarize` commands and are left out."""
    lines = README.read_text().splitlines()
    start = lines.index(COMMAND_TABLE_HEADER) + 2  # past the header and its rule
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cell = re.split(r"(?<!\\)\|", line)[1].strip()
        if cell.startswith("`scripts/"):
            continue
        words = cell.strip("`").split()
        assert words[0] == "summarize", f"a row that names no summarize command: {cell}"
        path = []
        for word in words[1:]:
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            path.append(word)
        rows[tuple(path)] = cell
    return rows


COMMANDS = cli_commands()


def shown(path: tuple[str, ...]) -> str:
    return " ".join(("summarize", *path))


# -- the README is a first page -----------------------------------------------------------------


def test_the_readme_is_at_most_250_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines: move reference to docs/"


# -- the command table says what the command line has -------------------------------------------


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=shown)
def test_every_command_has_a_row_that_names_each_of_its_long_options(path):
    rows = command_rows()
    assert path in rows, f"README's command table has no row for `{shown(path)}`"
    cell = rows[path]
    assert cell.startswith(f"`{shown(path)}")
    missing = [
        option
        for option in long_options(COMMANDS[path])
        if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", cell)
    ]
    assert missing == [], f"the row of `{shown(path)}` lacks {', '.join(missing)}"


def test_no_row_names_a_command_the_command_line_does_not_have():
    assert sorted(set(command_rows()) - set(COMMANDS)) == []


# -- the configuration page has every setting ---------------------------------------------------


def test_every_setting_has_a_row_in_the_configuration_page():
    page = (ROOT / "docs" / "configuration.md").read_text()
    variables = ["SUMMARIZE_" + field.metadata["env"] for field in fields(Settings)]
    assert [v for v in variables if not re.search(rf"^\| .*`{v}`", page, re.M)] == []


# -- every link and path leads somewhere --------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    assert [why for target in relative_links(page) if (why := broken(page, target))] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_into_the_checkout_names_a_file_or_folder_that_exists(page):
    """`core/tables.py` and `samples/schemas/` exist; `core/prompt.result_key` is a name in
    `core/prompt.py`."""
    missing = []
    for path in {m for line in prose(page.read_text()) for m in REPOSITORY_PATH.findall(line)}:
        folder, _, name = path.rpartition("/")
        module = ROOT / folder / (name.split(".")[0] + ".py")
        if not (ROOT / path).exists() and not module.exists():
            missing.append(path)
    assert sorted(missing) == []
