"""Which fields of a record hold its text and its id: --text-field and --id-field, names
tried in order, and FILE=NAME for the record files called FILE."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Fields:
    """Which fields of a record hold its text and its id: of each list, the first the record
    has (a CSV file's header decides once for all its rows)."""

    text: tuple[str, ...] = ("text",)
    id: tuple[str, ...] = ("id",)

    def chosen(self, names) -> Fields | None:
        """The fields these names (a record's, or a header's) hold; None without a text field."""
        text = next((name for name in self.text if name in names), None)
        if text is None:
            return None
        return Fields((text,), (next((name for name in self.id if name in names), self.id[0]),))

    @property
    def texts(self) -> str:
        return " or ".join(map(repr, self.text))


DEFAULT_FIELDS = Fields()


@dataclass(frozen=True)
class FieldChoice:
    """--text-field and --id-field as given: names tried in order, and FILE=NAME for the
    record files of that name (a folder may mix files whose text is in other columns)."""

    default: Fields = DEFAULT_FIELDS
    files: tuple[tuple[str, Fields], ...] = ()

    def of(self, path: str) -> Fields:
        name = os.path.basename(path.rstrip("/"))
        return next((fields for file, fields in self.files if file == name), self.default)

    @classmethod
    def parse(cls, texts: Iterable[str], ids: Iterable[str]) -> FieldChoice:
        """From the options' values; ValueError naming a bad one."""
        plain: dict[str, list[str]] = {"text": [], "id": []}
        named: dict[str, dict[str, list[str]]] = {}
        for kind, values in (("text", texts), ("id", ids)):
            for value in values:
                file, sep, name = value.rpartition("=") if "=" in value else ("", "", value)
                if not name.strip() or (sep and not file.strip()):
                    raise ValueError(f"--{kind}-field {value!r}: give NAME or FILE=NAME")
                if sep:
                    named.setdefault(file, {"text": [], "id": []})[kind].append(name)
                else:
                    plain[kind].append(name)
        default = Fields(
            tuple(plain["text"]) or DEFAULT_FIELDS.text, tuple(plain["id"]) or DEFAULT_FIELDS.id
        )
        files = tuple(
            (file, Fields(tuple(given["text"]) or default.text, tuple(given["id"]) or default.id))
            for file, given in named.items()
        )
        return cls(default, files)


DEFAULT_CHOICE = FieldChoice()
