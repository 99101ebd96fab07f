"""A script run in a fresh Python process, for what one test process cannot show again: the
modules an import loads, what the first export makes, state the test process has long had."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def last_json_line(script: str, *args: str, timeout: int = 600) -> Any:
    """The last line ``script`` prints, read as JSON; it fails (with its stderr) when the
    process does."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
