"""Web pages, PDFs and Word files as plain text: what `submit` summarizes of them.

Each extractor takes the file's bytes and the most text to take out of them, and
returns the text, or raises `NoText` with a reason a user can act on. Whatever else
a library raises on a malformed or hostile file becomes a `NoText` too (`text_of`),
so one file never stops a submit; `submit` runs them in processes of their own with
a time and memory limit (jobs/extraction.py). The libraries load on first use, so a
submit of `.txt` files never imports them.

A PDF or Word file is a container: the size limit (SUMMARIZE_MAX_DOC_BYTES) applies to
the text taken out of it, and the file itself may be CONTAINER_FACTOR times larger.
Taking text out stops as soon as it passes the limit, and a Word file's parts are
weighed by the sizes its zip directory declares before any is unpacked.
"""

from __future__ import annotations

import io
import logging
import os
import re
import zipfile

from core.errors import described

PAGE_SUFFIXES = (".html", ".htm")
PDF_SUFFIXES = (".pdf",)
WORD_SUFFIXES = (".docx",)
CONTAINER_SUFFIXES = (*PDF_SUFFIXES, *WORD_SUFFIXES)
REFUSED = {  # kinds that are documents but cannot be read: each is a failed row saying why
    ".doc": "an old Word .doc file, which cannot be read: save it as .docx (in Word or "
    "LibreOffice, or `soffice --headless --convert-to docx FILE`) and submit that",
}
SUFFIXES = (*PAGE_SUFFIXES, *CONTAINER_SUFFIXES, *REFUSED)
CONTAINERS = ("pdf", "word")  # kinds whose file holds far more than its text
CONTAINER_FACTOR = 20  # a PDF or .docx may be this many times SUMMARIZE_MAX_DOC_BYTES
MAX_PDF_PAGES = 5000  # more is a book to split, or a file made to take long
WORD_XML_FACTOR = 20  # a .docx's XML may unpack to this many times SUMMARIZE_MAX_DOC_BYTES
WORD_XML_FLOOR = 8 << 20  # ... or to this (styles, themes and fonts alone take hundreds of KB)
MAX_PACKING_RATIO = 100  # a part unpacking to more than this many times its packed size
PACKING_CHECKED_BYTES = 1 << 20  # ... is a zip bomb, once it unpacks to more than this
WORD_PARTS = (".xml", ".rels")  # the parts with text or structure; media are never unpacked
LIBRARIES = {"page": "trafilatura", "pdf": "pypdf", "word": "docx"}  # imported by `load`
WHAT = {"page": "a web page", "pdf": "a PDF", "word": "a Word .docx file"}


class NoText(ValueError):
    """The file holds no text to summarize, or cannot be opened; the message says which."""


def kind(path: str) -> str | None:
    """ "page", "pdf", "word", or None for a file that is read as text."""
    lower = path.lower()
    for suffixes, name in ((PAGE_SUFFIXES, "page"), (PDF_SUFFIXES, "pdf"), (WORD_SUFFIXES, "word")):
        if lower.endswith(suffixes):
            return name
    return None


def limit(path: str, max_bytes: int) -> int:
    """The most bytes a document file may have: SUMMARIZE_MAX_DOC_BYTES, or CONTAINER_FACTOR
    times it for a PDF or Word file, which holds far more than its text."""
    return max_bytes * (CONTAINER_FACTOR if kind(path) in CONTAINERS else 1)


def refused(path: str) -> str | None:
    """Why a document of a kind summarize cannot read is refused; None for the others."""
    return REFUSED.get(os.path.splitext(path)[1].lower())


def text_of(kind_: str, raw: bytes, max_bytes: int) -> str:
    """The text of a page, PDF or Word file's bytes (`kind_` from `kind`), of at most
    `max_bytes` in UTF-8. Any failure of the library is a NoText naming what it was;
    only MemoryError passes, for the caller to say how much memory the file wanted."""
    try:
        return {"page": page, "pdf": pdf, "word": word}[kind_](raw, max_bytes)
    except (NoText, MemoryError):
        raise
    except RecursionError:
        raise NoText(f"not {WHAT[kind_]} that can be read (it is nested too deeply)") from None
    except Exception as exc:  # noqa: BLE001 - a hostile file may raise anything
        suffix = "; a .doc needs converting" if kind_ == "word" else ""
        raise NoText(f"not {WHAT[kind_]} that can be read ({described(exc)}){suffix}") from None


def load() -> dict[str, str | None]:
    """Import every format's library; for each kind, None or why it cannot be imported (with
    the fix). Extraction processes call it before they take a file, and `doctor` shows it."""
    found: dict[str, str | None] = {}
    for kind_, module in LIBRARIES.items():
        try:
            __import__(module)
            found[kind_] = None
        except Exception as exc:  # noqa: BLE001 - an ImportError, or a library's own at import
            found[kind_] = (
                f"{module} cannot be imported ({described(exc)}): reinstall summarize "
                "with `scripts/install cpu` (it installs the versions in constraints/)"
            )
    return found


def too_large(size: int | None, limit: int, kind_: str | None) -> str:
    """Why a file, or the text taken out of one (`kind_` "text"), is over the limit."""
    what = f"{size:,} bytes > {limit:,}" if size is not None else f"over {limit:,} bytes"
    if kind_ in CONTAINERS:
        return (
            f"larger than {CONTAINER_FACTOR} x SUMMARIZE_MAX_DOC_BYTES ({what}): "
            "split it or raise the limit"
        )
    if kind_ == "text":
        return (
            f"its text is larger than SUMMARIZE_MAX_DOC_BYTES ({what}): split it or raise the limit"
        )
    return f"larger than SUMMARIZE_MAX_DOC_BYTES ({what}): split it or raise the limit"


class _Lines:
    """Text taken out a piece at a time, refused as soon as it passes the byte limit."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.size, self.lines = max_bytes, 0, []

    def add(self, text: str) -> None:
        self.size += len(text.encode("utf-8", "surrogatepass")) + 2
        if self.size > self.max_bytes + 2:
            raise NoText(too_large(None, self.max_bytes, "text"))
        self.lines.append(text)

    def joined(self) -> str:
        return "\n\n".join(self.lines)


def titled(title: str | None, text: str) -> str:
    """`Title: …` first, as Markdown's first heading is (jobs/markup.py), and not twice."""
    title = (title or "").strip()
    if not title:
        return text
    first, _, rest = text.partition("\n")
    if first.strip() == title:
        text = rest.lstrip("\n")
    return f"Title: {title}\n\n{text}"


def page(raw: bytes, max_bytes: int) -> str:
    """A web page's main text, without scripts, styles, navigation, headers and footers
    (trafilatura, which reads the page's declared encoding). A page is no container: the
    file itself is within the limit, and its text is weighed after."""
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)  # it logs each empty page
    found = trafilatura.bare_extraction(
        raw, include_comments=False, include_tables=True, with_metadata=True
    )
    text = (found.text or "").strip() if found is not None else ""
    if not text:
        raise NoText("no main text found in the page (only navigation, scripts or markup)")
    return titled(found.title, text)


def pdf(raw: bytes, max_bytes: int) -> str:
    """A PDF's text layer, page after page (pypdf). A scan has none: it needs OCR first."""
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # warnings about odd but readable files
    reader = PdfReader(io.BytesIO(raw))
    if reader.is_encrypted and not reader.decrypt(""):
        raise NoText("the PDF is encrypted with a password: save an unprotected copy")
    count = len(reader.pages)
    if count > MAX_PDF_PAGES:
        raise NoText(f"the PDF has {count:,} pages, more than {MAX_PDF_PAGES:,}: split it")
    lines = _Lines(max_bytes)
    for each in reader.pages:
        text = (each.extract_text() or "").strip()
        if text:
            lines.add(text)
    title = (reader.metadata or {}).get("/Title") if reader.metadata else None
    if not lines.lines:
        raise NoText(
            f"the PDF has no text layer ({count} pages of images, a scan?): run OCR on it "
            "first (for example `ocrmypdf in.pdf out.pdf`) and submit the result"
        )
    return titled(title if isinstance(title, str) else None, _unbroken(lines.joined()))


def word(raw: bytes, max_bytes: int) -> str:
    """A Word (.docx) file's paragraphs and tables, in order (python-docx); a heading styled
    Title (or the first Heading 1) becomes `Title: …`."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(_word_parts(raw, max_bytes)))
    title, lines = None, _Lines(max_bytes)
    for block in document.element.body.iterchildren():
        tag = block.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(block, document)
            text = paragraph.text.strip()
            if text and title is None and not lines.lines and _a_title(paragraph):
                title = text  # the style is looked up once: python-docx reads every style a time
            elif text:
                lines.add(text)
        elif tag == "tbl":
            for row in Table(block, document).rows:
                cells = [cell.text.strip() for cell in row.cells]
                if any(cells):
                    lines.add(" | ".join(cells))
    text = lines.joined()
    if not text.strip():
        raise NoText("the Word file has no text")
    return titled(title, text)


def _a_title(paragraph) -> bool:
    style = paragraph.style
    return style is not None and style.name in ("Title", "Heading 1")


def _word_parts(raw: bytes, max_bytes: int) -> bytes:
    """The .docx with its media emptied, once the sizes its zip directory declares for its
    XML are within bounds: python-docx unpacks every part it is given, so a small file with
    a huge picture (or a part that unpacks a thousandfold) would cost its whole size."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as exc:
        raise NoText(
            f"not a Word .docx file that can be read ({exc}); a .doc needs converting"
        ) from None
    parts = archive.infolist()
    xml = [p for p in parts if p.filename.lower().endswith(WORD_PARTS)]
    unpacked = sum(p.file_size for p in xml)
    if unpacked > max(WORD_XML_FACTOR * max_bytes, WORD_XML_FLOOR):
        raise NoText(
            f"its XML unpacks to {unpacked:,} bytes, more than {WORD_XML_FACTOR} x "
            "SUMMARIZE_MAX_DOC_BYTES: split it or raise the limit"
        )
    for part in xml:
        ratio = part.file_size / max(part.compress_size, 1)
        if part.file_size > PACKING_CHECKED_BYTES and ratio > MAX_PACKING_RATIO:
            raise NoText(
                f"its part {part.filename[:80]!r} unpacks to {ratio:,.0f} times its packed "
                "size (a zip bomb?): not read"
            )
    emptied = io.BytesIO()
    with zipfile.ZipFile(emptied, "w", zipfile.ZIP_STORED) as copy:
        for part in parts:
            kept = part.filename.lower().endswith(WORD_PARTS)
            copy.writestr(part.filename, archive.read(part) if kept else b"")
    return emptied.getvalue()


_HYPHENATED = re.compile(r"(\w)-\n(\w)")


def _unbroken(text: str) -> str:
    """Words a PDF hyphenated at a line's end joined again."""
    return _HYPHENATED.sub(r"\1\2", text)
