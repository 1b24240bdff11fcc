"""The benchmark's ratio line: one run of each mode, or several in turn."""

from scripts.bench import runner as bench


def run(mode: str, docs: int, seconds: float) -> dict:
    return {"mode": mode, "docs": docs, "seconds": seconds}


def test_one_run_of_each_mode_gives_the_ratio_of_their_rates():
    runs = {"raw": [run("raw", 100, 50.0)], "pipeline": [run("pipeline", 100, 40.0)]}
    assert bench.ratios(runs) == "pipeline/raw=1.25"


def test_modes_run_in_turn_count_all_their_documents_over_all_their_seconds():
    runs = {
        "raw": [run("raw", 100, 40.0), run("raw", 100, 80.0)],
        "pipeline": [run("pipeline", 100, 50.0), run("pipeline", 100, 60.0)],
    }
    # (40 + 80) / (50 + 60): not the pairs' mean ratio (1.07), nor the last pair's (1.33)
    assert bench.ratios(runs) == "pipeline/raw=1.09 (2 runs of raw, 2 runs of pipeline)"


def test_modes_without_a_time_give_no_ratio():
    runs = {"ceiling": [{"mode": "ceiling", "docs": 100_000, "worker_docs_per_s": 8000.0}]}
    assert bench.ratios(runs) == ""
