"""Documents of each kind the tests read, made byte by byte: a web page, PDFs, a Word file."""

from __future__ import annotations

import io

import docx
from fpdf import FPDF

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Bridge closed | City News</title>
<script>track('visit'); var secret = "not summarized";</script><style>p { color: red }</style>
</head><body>
<nav><a href="/">Home</a> · <a href="/sport">Sport</a> · <a href="/weather">Weather</a></nav>
<header>City News: all the news from the city</header>
<article><h1>Harbour bridge closes for repairs</h1>
<p>The harbour bridge will close for six weeks from Monday while engineers replace worn
cables, the council said on Tuesday. It is the first full closure since the bridge opened.</p>
<p>Buses will run a shuttle across the river every ten minutes, and ferries will add extra
sailings in the morning and evening, according to the transport department.</p></article>
<footer>© 2026 City News · Privacy · Cookies</footer></body></html>"""


def pdf_bytes(pages: list[str], title: str | None = None) -> bytes:
    document = FPDF()
    if title:
        document.set_title(title)
    document.set_font("helvetica", size=11)
    for text in pages:
        document.add_page()
        if text:
            document.multi_cell(0, 6, text)
        else:  # a scanned page: a picture, no text layer
            document.set_fill_color(90, 90, 90)
            document.rect(20, 20, 150, 200, style="F")
    return bytes(document.output())


def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_heading("Quarterly report", level=0)
    document.add_paragraph("Sales rose by a tenth in the third quarter.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Region", "Sales"
    table.cell(1, 0).text, table.cell(1, 1).text = "North", "1,200"
    document.add_paragraph("The north led the growth.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
