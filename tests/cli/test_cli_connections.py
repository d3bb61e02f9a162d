"""``--max-connections`` holds the requests in flight to a provider, whatever ``--concurrency``.

Issue 40: ``--concurrency 64`` ("items graded at once") put 128 requests in flight at the
stand-in, since coverage and defects each send one per item, and providers limit requests, not
items. The stand-in's own peak of requests handled at once is the measure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import run_cli

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "judge" / "data" / "examples_chartom.jsonl"


def _items(folder: Path, copies: int) -> Path:
    """The bundled examples ``copies`` times over, each copy a distinct answer (no cache hit)."""
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    path = folder / "items.jsonl"
    with path.open("w") as out:
        for n in range(copies):
            for row in rows:
                answer = f"{row['response']} (copy {n})"
                out.write(json.dumps({**row, "id": f"{row['id']}-{n}", "response": answer}) + "\n")
    return path


@pytest.mark.parametrize(("options", "peak"), [
    (["--max-connections", "8"], 8),
    ([], 32),  # the default
    # No effective limit: 64 items in flight want 128 requests at once (what the old code sent).
    (["--max-connections", "1024"], 128),
])
def test_requests_in_flight_never_pass_max_connections(
    tmp_path: Path, options: list[str], peak: int
) -> None:
    items = _items(tmp_path, 8)  # 80 items: 160 requests, 128 of them wanted at once
    # Each answer waits long enough that every request the run lets out is in flight together.
    with OpenAIStandIn(latency=0.4) as judge:
        done = run_cli([
            "grade", str(items), "--out", str(tmp_path / "out.jsonl"), "--model",
            "openai/standin", "--api-base", judge.base_url, "--metrics", "coverage,defects",
            "--cache-dir", str(tmp_path / "cache"), "--quiet", "--no-preflight",
            "--concurrency", "64", *options,
        ])
        stats = judge.stats()
    assert done.returncode == 0, done.stderr
    assert stats.requests == 160
    # Held exactly: reached, never passed.
    assert stats.max_in_flight == peak
