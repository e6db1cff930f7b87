"""The README's main job, end to end on a very short schedule (the real one is 560 updates)."""
import os
import subprocess

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_colors_recipe_runs_end_to_end(tmp_path):
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "examples", "colors", "run.sh"), "--max-update", "3", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "lexicon (Simple rule, section 4.2): 4 entries" in out
    assert "LSTM (--arch lstm_plain)" in out and "LSTM + Lex.: Simple (--arch lex_lstm)" in out
    # Both models decoded all 10 test sentences (score.py checks the count against the reference).
    for model in ("lstm", "lex_simple"):
        with open(tmp_path / model / "seed1" / "generate.txt") as f:
            assert sum(line.startswith("H-") for line in f) == 10
