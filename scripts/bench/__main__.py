"""`python scripts/bench`: the benchmark (its modes are described in __init__.py)."""

import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its packages

from scripts.bench.runner import main  # noqa: E402

if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    main()
