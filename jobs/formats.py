"""Web pages, PDFs and Word files as plain text: what `submit` summarizes of them.

Each extractor takes the file's bytes and returns its text, or raises `NoText`
with a reason a user can act on. The libraries load on first use, so a submit of
`.txt` files never imports them. A PDF or Word file is a container: the size
limit (SUMMARIZE_MAX_DOC_BYTES) applies to the text taken out of it, and the file
itself may be CONTAINER_FACTOR times larger.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile

PAGE_SUFFIXES = (".html", ".htm")
PDF_SUFFIXES = (".pdf",)
WORD_SUFFIXES = (".docx",)
CONTAINER_SUFFIXES = (*PDF_SUFFIXES, *WORD_SUFFIXES)
SUFFIXES = (*PAGE_SUFFIXES, *CONTAINER_SUFFIXES)
CONTAINERS = ("pdf", "word")  # kinds whose file holds far more than its text
CONTAINER_FACTOR = 20  # a PDF or .docx may be this many times SUMMARIZE_MAX_DOC_BYTES


class NoText(ValueError):
    """The file holds no text to summarize, or cannot be opened; the message says which."""


def kind(path: str) -> str | None:
    """ "page", "pdf", "word", or None for a file that is read as text."""
    lower = path.lower()
    for suffixes, name in ((PAGE_SUFFIXES, "page"), (PDF_SUFFIXES, "pdf"), (WORD_SUFFIXES, "word")):
        if lower.endswith(suffixes):
            return name
    return None


def text_of(kind_: str, raw: bytes) -> str:
    """The text of a page, PDF or Word file's bytes (`kind_` from `kind`)."""
    return {"page": page, "pdf": pdf, "word": word}[kind_](raw)


def described(exc: BaseException, longest: int = 300) -> str:
    """An exception as one line a user can read: its type and the start of its message."""
    message = " ".join(str(exc).split())
    if len(message) > longest:
        message = message[: longest - 1] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def titled(title: str | None, text: str) -> str:
    """`Title: …` first, as Markdown's first heading is (jobs/markup.py), and not twice."""
    title = (title or "").strip()
    if not title:
        return text
    first, _, rest = text.partition("\n")
    if first.strip() == title:
        text = rest.lstrip("\n")
    return f"Title: {title}\n\n{text}"


def page(raw: bytes) -> str:
    """A web page's main text, without scripts, styles, navigation, headers and footers
    (trafilatura, which reads the page's declared encoding)."""
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)  # it logs each empty page
    found = trafilatura.bare_extraction(
        raw, include_comments=False, include_tables=True, with_metadata=True
    )
    text = (found.text or "").strip() if found is not None else ""
    if not text:
        raise NoText("no main text found in the page (only navigation, scripts or markup)")
    return titled(found.title, text)


def pdf(raw: bytes) -> str:
    """A PDF's text layer, page after page (pypdf). A scan has none: it needs OCR first."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # warnings about odd but readable files
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise NoText("the PDF is encrypted with a password: save an unprotected copy")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata or {}).get("/Title") if reader.metadata else None
    except NoText:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise NoText(f"not a PDF that can be read ({type(exc).__name__}: {exc})") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise NoText(
            f"the PDF has no text layer ({len(pages)} pages of images, a scan?): run OCR on it "
            "first (for example `ocrmypdf in.pdf out.pdf`) and submit the result"
        )
    return titled(title if isinstance(title, str) else None, _unbroken(text))


def word(raw: bytes) -> str:
    """A Word (.docx) file's paragraphs and tables, in order (python-docx); a heading styled
    Title (or the first Heading 1) becomes `Title: …`."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(io.BytesIO(raw))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise NoText(
            f"not a Word .docx file that can be read ({exc}); a .doc needs converting"
        ) from None
    title, lines = None, []
    for block in document.element.body.iterchildren():
        tag = block.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(block, document)
            text = paragraph.text.strip()
            style = paragraph.style.name if paragraph.style is not None else ""
            if text and title is None and not lines and style in ("Title", "Heading 1"):
                title = text
            elif text:
                lines.append(text)
        elif tag == "tbl":
            table = Table(block, document)
            for row in table.rows:
                cells = [cell.text.strip() for cell in row.cells]
                if any(cells):
                    lines.append(" | ".join(cells))
    text = "\n\n".join(lines)
    if not text.strip():
        raise NoText("the Word file has no text")
    return titled(title, text)


_HYPHENATED = re.compile(r"(\w)-\n(\w)")


def _unbroken(text: str) -> str:
    """Words a PDF hyphenated at a line's end joined again."""
    return _HYPHENATED.sub(r"\1\2", text)
