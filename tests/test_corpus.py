"""Walking folders and reading files: every file gets a clear outcome, none crashes the walk."""

from __future__ import annotations

import hashlib
import os

import pytest

from jobs import corpus, folders
from jobs.documents import Unreadable
from tests.helpers import write


def test_folders_are_walked_recursively_in_a_stable_order(tmp_path):
    write(tmp_path, "b.txt", "b")
    write(tmp_path, "a/z.md", "z")
    write(tmp_path, "a/y.TXT", "y")
    write(tmp_path, "c.png", "c")

    found = [(os.path.relpath(f.path, tmp_path), f.kind) for f in folders.walk([tmp_path])]

    assert found == [
        ("a/y.TXT", "document"),
        ("a/z.md", "document"),
        ("b.txt", "document"),
        ("c.png", "skipped"),
    ]


def test_a_path_that_does_not_exist_is_reported_not_raised(tmp_path):
    (found,) = folders.walk([tmp_path / "missing"])
    assert (found.kind, found.problem) == ("problem", "does not exist")


def test_a_symlink_loop_of_folders_is_reported_once_and_the_walk_goes_on(tmp_path):
    write(tmp_path, "docs/a.txt", "a")
    os.symlink(tmp_path / "docs", tmp_path / "docs" / "again")

    found = list(folders.walk([tmp_path]))

    assert [(os.path.basename(f.path), f.kind) for f in found] == [
        ("a.txt", "document"),
        ("again", "problem"),
    ]
    assert found[1].problem == "symlink loop: it points back to a folder above it"


def test_a_symlink_that_loops_on_itself_is_reported(tmp_path):
    os.symlink(tmp_path / "x.txt", tmp_path / "y.txt")
    os.symlink(tmp_path / "y.txt", tmp_path / "x.txt")
    found = list(folders.walk([tmp_path]))
    assert {f.problem for f in found} == {"symlink loop: the link never reaches a file"}


def test_a_text_file_is_read_with_its_content_hash(tmp_path):
    path = write(tmp_path, "a.txt", "Héllo\r\nworld\n")
    text = corpus.read(str(path), 1000)
    assert text.body == "Héllo\nworld\n"
    assert text.content_hash == hashlib.sha256("Héllo\nworld\n".encode()).hexdigest()
    assert text.size_bytes == len("Héllo\nworld\n".encode())


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path):
    path = write(tmp_path, "bom.txt", "\ufeffsame".encode("utf-8"))
    assert corpus.read(str(path), 1000).body == "same"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file: nothing to summarize"),
        (b"  \n\t\n", "empty file: nothing to summarize"),
        (
            b"PK\x03\x04\x00\x00binary",
            "binary file (it contains NUL bytes): only text is summarized",
        ),
        (b"caf\xe9 au lait", "not valid UTF-8 (byte 0xe9 at offset 3): convert it to UTF-8"),
        (
            b"x" * 101,
            "larger than SUMMARIZE_MAX_DOC_BYTES (101 bytes > 100): split it or raise the limit",
        ),
    ],
)
def test_a_file_that_cannot_be_a_document_says_why(tmp_path, content, reason):
    path = write(tmp_path, "f.txt", content)
    assert corpus.read(str(path), 100) == Unreadable(str(path), reason)


def test_a_file_that_cannot_be_opened_says_why(tmp_path):
    folder = tmp_path / "looks-like.txt"  # opening a folder fails as an unreadable file does
    folder.mkdir()
    assert corpus.read(str(folder), 100).reason == "cannot be read (Is a directory)"


@pytest.mark.parametrize("name", ["with space.txt", "new\nline.txt", "ünïcödé 文書.txt"])
def test_unusual_file_names_are_walked_and_read(tmp_path, name):
    write(tmp_path, name, "content")
    (found,) = folders.walk([tmp_path])
    assert found.path == str(tmp_path / name)
    assert corpus.read(found.path, 100).body == "content"


def test_a_symlink_that_leaves_the_folder_given_is_refused_unless_links_are_followed(tmp_path):
    write(tmp_path, "secret/passwords.txt", "hunter2")
    write(tmp_path, "corpus/a.txt", "a")
    os.symlink(tmp_path / "secret" / "passwords.txt", tmp_path / "corpus" / "notes.txt")
    os.symlink(tmp_path / "secret", tmp_path / "corpus" / "elsewhere")
    os.symlink(tmp_path / "corpus" / "a.txt", tmp_path / "corpus" / "same.txt")  # stays inside

    found = {os.path.basename(f.path): f for f in folders.walk([tmp_path / "corpus"])}

    assert found["notes.txt"].kind == "document"  # a .txt: it gets a failed row saying why
    assert found["notes.txt"].problem == (
        f"a symlink to {tmp_path}/secret/passwords.txt, outside the folder given: not followed "
        "(--follow-links follows it)"
    )
    assert found["elsewhere"].kind == "problem"
    assert found["same.txt"].problem is None
    assert corpus.read(found["same.txt"].path, 100, found["same.txt"].target).body == "a"
    followed = [os.path.basename(f.path) for f in folders.walk([tmp_path / "corpus"], True)]
    assert followed == ["a.txt", "passwords.txt", "notes.txt", "same.txt"]


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")

    (found,) = folders.walk([tmp_path])
    item = corpus.read(found.path, 1000, found.target)

    assert item.reason == "not a regular file (a FIFO): not read"


def test_pairs_of_folder_links_cannot_multiply_the_files(tmp_path):
    folder = tmp_path / "tree"
    write(folder, "doc.txt", "one document")
    level = folder
    for i in range(14):  # each level links twice to the level above: 2^14 paths to doc.txt
        nxt = level / f"level{i}"
        nxt.mkdir()
        os.symlink(level, nxt / "left")
        os.symlink(level, nxt / "right")
        level = nxt

    found = list(folders.walk([folder]))

    assert [f.path for f in found if f.kind == "document"] == [str(folder / "doc.txt")]
    assert len(found) == 1 + 2 * 14  # the file, and each link reported once


def test_a_tree_deeper_than_pythons_recursion_limit_is_walked(tmp_path):
    deep = tmp_path
    for _ in range(1500):  # os.makedirs would itself recurse too deep
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.txt").write_text("found")

    try:
        (found,) = folders.walk([tmp_path])
        assert found.path == str(deep / "bottom.txt")
    finally:  # pytest's clean-up (shutil.rmtree) recurses too deep for it: take it down here
        (deep / "bottom.txt").unlink()
        while deep != tmp_path:
            deep.rmdir()
            deep = deep.parent


def test_a_folder_swapped_for_a_link_after_it_was_listed_is_not_read_through(tmp_path):
    write(tmp_path, "secret/a.txt", "hunter2")
    write(tmp_path, "corpus/sub/a.txt", "an article")
    walked = folders.walk([tmp_path / "corpus"])
    found = next(walked)  # corpus/sub/a.txt: listed, not yet read
    (tmp_path / "corpus" / "sub").rename(tmp_path / "corpus" / "was-sub")
    os.symlink(tmp_path / "secret", tmp_path / "corpus" / "sub")

    read = corpus.load(found, 1000)

    assert read == Unreadable(
        found.path,
        "a folder on its path was replaced since it was listed (by a symlink?): not followed",
    )


def test_a_folder_swapped_for_a_link_before_it_is_listed_is_refused(tmp_path):
    write(tmp_path, "secret/a.txt", "hunter2")
    write(tmp_path, "corpus/a.txt", "first")
    write(tmp_path, "corpus/sub/b.txt", "second")
    walked = folders.walk([tmp_path / "corpus"])
    first = next(walked)  # corpus/a.txt: the root is listed, sub/ not yet
    (tmp_path / "corpus" / "sub").rename(tmp_path / "was-sub")
    os.symlink(tmp_path / "secret", tmp_path / "corpus" / "sub")

    rest = list(walked)

    assert first.path.endswith("corpus/a.txt")
    assert [(os.path.basename(f.path), f.kind, f.problem) for f in rest] == [
        ("sub", "problem", "replaced since it was listed (by a symlink?): not walked")
    ]


def test_files_under_a_link_inside_the_folder_are_read_through_its_real_path(tmp_path):
    write(tmp_path, "corpus/real/a.txt", "through the link")
    os.symlink(tmp_path / "corpus" / "real", tmp_path / "corpus" / "alias")

    found = [f for f in folders.walk([tmp_path / "corpus"]) if f.kind == "document"]

    assert [os.path.relpath(f.path, tmp_path) for f in found] == ["corpus/alias/a.txt"]
    assert corpus.load(found[0], 1000).body == "through the link"
