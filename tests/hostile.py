"""Files made to hurt a reader, built byte by byte: each is a way a night's corpus has been
seen to stop a submit (a crash, a bomb, a file that takes hours). The tests and
`python scripts/bench --modes hostile` put them beside good documents."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from pathlib import Path

import docx

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MEGABYTE = 1_000_000


def pdf(pages: list[bytes], shared: bool = False) -> bytes:
    """A PDF whose pages draw these content streams (compressed), or all draw the first."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    count = len(pages)
    first_page = 4
    kids = " ".join(f"{first_page + 2 * i} 0 R" for i in range(count))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, content in enumerate(pages):
        stream = first_page + 2 * (0 if shared else i) + 1
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {stream} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        packed = zlib.compress(content if not shared or i == 0 else b"", 9)
        objects.append(
            f"<< /Length {len(packed)} /Filter /FlateDecode >>\nstream\n".encode()
            + packed
            + b"\nendstream"
        )
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def shown_text(words: str) -> bytes:
    """A content stream that writes these words."""
    return f"BT /F1 12 Tf 72 712 Td ({words}) Tj ET".encode()


def docx_with(document_xml: bytes | None = None, extra: dict[str, bytes] | None = None) -> bytes:
    """A real .docx (python-docx's template) with its body's XML or parts replaced."""
    made = io.BytesIO()
    sample = docx.Document()
    sample.add_paragraph("A short paragraph.")
    sample.save(made)
    source = zipfile.ZipFile(io.BytesIO(made.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for part in source.infolist():
            body = source.read(part)
            if part.filename == "word/document.xml" and document_xml is not None:
                body = document_xml
            target.writestr(part.filename, body)
        for name, body in (extra or {}).items():
            target.writestr(name, body)
    return out.getvalue()


def body_xml(inner: str) -> bytes:
    return f'<?xml version="1.0"?><w:document xmlns:w="{W}"><w:body>{inner}</w:body></w:document>'.encode()


def paragraphs(count: int) -> bytes:
    return body_xml("".join(f"<w:p><w:r><w:t>p{i}</w:t></w:r></w:p>" for i in range(count)))


def nested_json(depth: int) -> str:
    return json.dumps({"id": f"deep-{depth}", "text": "A record with deep metadata."})[:-1] + (
        ', "extra": ' + "[" * depth + "]" * depth + "}"
    )


# name: what it holds, made to hurt a reader
HOSTILE = {
    "inflates.pdf": "a stream that inflates past pypdf's limit",
    "truncated.pdf": "the first half of a PDF",
    "shared-stream.pdf": "400 pages drawing one 1 MB content stream",
    "malformed.docx": "XML that does not close",
    "deep.docx": "XML nested 300 deep",
    "xml-bomb.docx": "a body of 15 MB of spaces (a thousandfold packing)",
    "huge-xml.docx": "a body of 200 MB of spaces",
    "million.docx": "a million paragraphs",
    "deep.html": "elements nested 80,000 deep",
    "nested.jsonl": "records nested 1,000 and 980 deep (lines 1 and 2)",
    "unclosed.csv": "a quote that never closes, over 70,000 lines (1.1 MB)",
}
# Made to be slow or large, yet holding text a reader can summarize: each must succeed
HEAVY = {
    "media-bomb.docx": "a paragraph beside a 300 MB all-zero picture",
    "paragraphs.docx": "40,000 paragraphs",
    "spaces.md": "a megabyte of spaces, then a word",
    "good-after-bad.jsonl": "a good record",  # nested.jsonl's third line, as its own file
}


def build(folder: Path) -> None:
    """Write every HOSTILE and HEAVY file into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "inflates.pdf": pdf([b" " * 80_000_000]),
        "truncated.pdf": pdf([shown_text("A page cut short.")] * 3)[:400],
        "shared-stream.pdf": pdf(
            [b" ".join([shown_text("Loop")] * (MEGABYTE // 40))] * 400, shared=True
        ),
        "malformed.docx": docx_with(body_xml("<w:p><w:r><w:t>open")[:-30]),
        "deep.docx": docx_with(body_xml("<w:p>" + "<w:r>" * 300 + "</w:r>" * 300 + "</w:p>")),
        "xml-bomb.docx": docx_with(body_xml(" " * 15 * MEGABYTE)),
        "huge-xml.docx": docx_with(body_xml(" " * 200 * MEGABYTE)),
        "million.docx": docx_with(paragraphs(1_000_000)),
        "deep.html": (
            "<html><body>" + "<div>" * 80_000 + "deep" + "</div>" * 80_000 + "</body></html>"
        ).encode(),
        "nested.jsonl": "\n".join([nested_json(1000), nested_json(980)]).encode(),
        "unclosed.csv": (
            'id,text\n1,"A quote that never closes\n' + "and a line more\n" * 70_000
        ).encode(),
        "media-bomb.docx": docx_with(extra={"word/media/image1.png": bytes(300 * MEGABYTE)}),
        "paragraphs.docx": docx_with(paragraphs(40_000)),
        "spaces.md": (" " * (MEGABYTE - 100) + "word").encode(),
        "good-after-bad.jsonl": json.dumps(
            {"id": "fine", "text": "A good record in a folder of bad ones."}
        ).encode(),
    }
    for name, content in files.items():
        (folder / name).write_bytes(content)
