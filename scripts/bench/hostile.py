"""hostile: the files of tests/hostile.py (bombs, malformed and deep files) beside the lee
articles and a good page, PDF and Word file, through a real `summarize submit`: its wall
time and the peak memory of it and its extraction processes together, and whether each
file got the row it should."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from scripts.bench.common import SUMMARIZE, place, submit_measured


def run(args) -> dict:
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results
    from tests import hostile
    from tests.test_formats import PAGE, docx_bytes, pdf_bytes

    work = Path(tempfile.mkdtemp(prefix="summarize-hostile-"))
    try:
        folder = work / "night"
        hostile.build(folder)
        good = sorted(args.corpus.glob("*.txt"))
        for article in good:
            shutil.copy(article, folder / article.name)
        (folder / "report.pdf").write_bytes(pdf_bytes(["The dam holds more water."], "Dam"))
        (folder / "q3.docx").write_bytes(docx_bytes())
        (folder / "bridge.html").write_text(PAGE)
        env = place(work, "hostile")
        subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
        took = submit_measured(folder, env, work / "submit.log")
        with database.connect(Settings.from_env(env)).connect() as conn:
            rows = conn.execute(sa.select(results.c.source_path, results.c.status)).all()
        statuses = {os.path.basename(path): status for path, status in rows}
        failed = {name for name, status in statuses.items() if status == "failed"}
        expected = {"nested.jsonl:1", "nested.jsonl:2", "unclosed.csv:2"} | (
            set(hostile.HOSTILE) - {"nested.jsonl", "unclosed.csv"}
        )
        return {
            "mode": "hostile",
            "files": len(hostile.HOSTILE) + len(hostile.HEAVY),
            "good": len(good) + 3,
            "submit_s": took["seconds"],
            "peak_tree_mb": took["peak_tree_mb"],
            "failed": len(failed),
            "queued": sum(status == "queued" for status in statuses.values()),
            "as_expected": failed == expected,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(result: dict) -> None:
    print(
        f"hostile   {result['files']} hostile and heavy files beside {result['good']} good "
        f"ones: submit {result['submit_s']:.1f} s, peak {result['peak_tree_mb']:.0f} MB with "
        f"its extraction processes; {result['failed']} failed, {result['queued']} queued, "
        f"{'each as expected' if result['as_expected'] else 'NOT AS EXPECTED'}"
    )
