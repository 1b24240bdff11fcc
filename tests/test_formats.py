"""Web pages, PDFs and Word files become their text; one with no text says why and how to fix it."""

from __future__ import annotations

from jobs import corpus
from jobs.documents import Text, Unreadable
from tests.documents import PAGE, docx_bytes, pdf_bytes
from tests.helpers import write


def read(path, max_bytes=1_000_000) -> Text | Unreadable:
    return corpus.read(str(path), max_bytes)


def test_a_web_page_is_its_main_text_without_scripts_styles_navigation_or_footer(tmp_path):
    found = read(write(tmp_path, "bridge.html", PAGE))

    assert isinstance(found, Text), found
    assert found.body.startswith("Title: Harbour bridge closes for repairs\n\nThe harbour bridge")
    assert "every ten minutes" in found.body and "transport department." in found.body
    for left_out in ("track(", "not summarized", "color: red", "Sport", "Privacy", "all the news"):
        assert left_out not in found.body


def test_a_page_in_another_declared_encoding_is_read_as_declared(tmp_path):
    page = PAGE.replace('charset="utf-8"', 'charset="iso-8859-1"').replace("repairs", "réparations")
    found = read(write(tmp_path, "latin.htm", page.encode("iso-8859-1", "replace")))

    assert "Harbour bridge closes for réparations" in found.body


def test_a_page_with_no_main_text_is_a_failure_that_says_so(tmp_path):
    found = read(write(tmp_path, "empty.html", "<html><body><script>x()</script></body></html>"))

    assert found == Unreadable(
        found.path, "no main text found in the page (only navigation, scripts or markup)"
    )


def test_a_pdf_is_its_text_layer_page_after_page(tmp_path):
    path = write(
        tmp_path,
        "report.pdf",
        pdf_bytes(
            ["The dam holds 40 per cent more water.", "Rain is due next week."], "Dam report"
        ),
    )

    found = read(path)

    assert isinstance(found, Text), found
    assert found.body == (
        "Title: Dam report\n\nThe dam holds 40 per cent more water.\n\nRain is due next week."
    )


def test_a_pdf_without_a_text_layer_is_a_failure_that_says_to_run_ocr(tmp_path):
    found = read(write(tmp_path, "scan.pdf", pdf_bytes(["", ""])))

    assert found == Unreadable(
        found.path,
        "the PDF has no text layer (2 pages of images, a scan?): run OCR on it first (for "
        "example `ocrmypdf in.pdf out.pdf`) and submit the result",
    )


def test_a_file_named_pdf_that_is_not_one_is_a_failure_not_a_crash(tmp_path):
    found = read(write(tmp_path, "fake.pdf", b"%PDF-1.7\n garbage \x00\x01 no xref"))

    assert isinstance(found, Unreadable)
    assert found.reason.startswith("not a PDF that can be read") or "no text layer" in found.reason


def test_a_pdf_may_be_larger_than_the_text_limit_but_its_text_may_not(tmp_path):
    words = "word " * 400
    path = write(tmp_path, "long.pdf", pdf_bytes([words, words]))
    size = path.stat().st_size

    assert isinstance(read(path, max_bytes=size // 2 + 4000), Text)  # file over the limit, text not
    found = read(path, max_bytes=1000)
    assert found.reason.startswith("its text is larger than SUMMARIZE_MAX_DOC_BYTES (")


def test_a_word_file_is_its_paragraphs_and_tables_in_order_with_its_title(tmp_path):
    found = read(write(tmp_path, "q3.docx", docx_bytes()))

    assert found.body == (
        "Title: Quarterly report\n\nSales rose by a tenth in the third quarter.\n\n"
        "Region | Sales\n\nNorth | 1,200\n\nThe north led the growth."
    )


def test_a_file_named_docx_that_is_not_one_says_so(tmp_path):
    found = read(write(tmp_path, "old.docx", b"\xd0\xcf\x11\xe0 an old .doc file"))

    assert isinstance(found, Unreadable)
    assert found.reason.startswith("not a Word .docx file that can be read (")
    assert found.reason.endswith("a .doc needs converting")


def test_the_doctor_reads_a_page_in_an_extraction_process(tmp_path):
    from core.settings import Settings
    from summarize.doctor import check_formats

    check = check_formats(Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path)}))

    assert check.ok, check
    assert check.found.startswith("web pages (trafilatura ")


def test_a_format_whose_library_cannot_load_fails_the_doctor_with_the_fix(tmp_path, monkeypatch):
    from core.settings import Settings
    from jobs import formats
    from summarize.doctor import check_formats

    monkeypatch.setitem(formats.LIBRARIES, "pdf", "pypdf_not_here")

    check = check_formats(Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path)}))

    assert not check.ok
    assert check.found == (
        "pypdf_not_here cannot be imported (ModuleNotFoundError: No module named "
        "'pypdf_not_here'): reinstall summarize with `scripts/install cpu` (it installs the "
        "versions in constraints/)"
    )


def test_a_word_files_pictures_are_never_unpacked(tmp_path):
    from tests.hostile import MEGABYTE, docx_with

    path = write(
        tmp_path, "photo.docx", docx_with(extra={"word/media/a.png": bytes(300 * MEGABYTE)})
    )

    assert read(path).body == "A short paragraph."


def test_a_word_part_that_unpacks_a_thousandfold_is_refused_before_it_is_unpacked(tmp_path):
    from tests.hostile import MEGABYTE, body_xml, docx_with

    path = write(tmp_path, "bomb.docx", docx_with(body_xml(" " * 15 * MEGABYTE)))

    assert read(path).reason == (
        "its part 'word/document.xml' unpacks to 1,019 times its packed size (a zip bomb?): "
        "not read"
    )


def test_taking_text_out_stops_once_it_passes_the_limit(tmp_path):
    from tests.hostile import docx_with, paragraphs

    path = write(tmp_path, "long.docx", docx_with(paragraphs(3000)))  # 18 KB of text

    assert read(path, max_bytes=10_000).reason == (
        "its text is larger than SUMMARIZE_MAX_DOC_BYTES (over 10,000 bytes): split it or raise "
        "the limit"
    )


def test_a_pdf_of_more_pages_than_the_most_is_refused_before_its_pages_are_read(tmp_path):
    from jobs.formats import MAX_PDF_PAGES
    from tests.hostile import pdf, shown_text

    path = write(
        tmp_path, "book.pdf", pdf([shown_text("Page.")] * (MAX_PDF_PAGES + 1), shared=True)
    )

    assert read(path).reason == "the PDF has 5,001 pages, more than 5,000: split it"
