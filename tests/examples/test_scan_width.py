"""LSTM + Simple at the paper's width (2 x 512) uses its lexicon from the first updates with the recipes' defaults,
and does not with the flags they had before the width fix (docs/authors_code.md, "At the paper's width"). Trained
through examples/scan/width_proxy.py, the CPU proxy of that diagnosis, on SCAN-grammar data made here."""

import json
import random

import pytest

from tests.helpers.toy_data import scan_full_line
from tests.helpers.environment import tool_module

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The recipe's own flags and the flags before the fix, 50 updates each (batch 32, seed 1) at 512 units."""
    root = tmp_path_factory.mktemp("width")
    data = root / "scan"
    data.mkdir()
    rng = random.Random(0)
    (data / "tasks_train_addprim_jump.txt").write_text("".join(scan_full_line(rng) + "\n" for _ in range(3000)))
    (data / "tasks_test_addprim_jump.txt").write_text("".join(scan_full_line(rng) + "\n" for _ in range(5)))
    out = root / "runs.jsonl"
    argv = ["--data", str(data), "--work", str(root / "work"), "--configs", "recipe,before", "--seeds", "1"]
    argv += ["--updates", "50", "--batch-size", "32", "--warmup", "100", "--log-interval", "10", "--json", str(out)]
    assert tool_module("width_proxy", "examples/scan").main(argv) == 0
    return {r["config"]: r for r in map(json.loads, out.read_text().splitlines())}


def test_the_recipes_lstm_simple_uses_its_lexicon_at_512_units(runs):
    recipe = runs["recipe"]
    assert recipe["exit_code"] == 0 and recipe["updates"] == 50 and recipe["hidden"] == 512
    assert "--exclude-special-outputs" in recipe["command"]  # the recipe's flags, not the proxy's
    # p_gate is p_write's weight (eq. 10): the lexicon carries most of the output after 50 updates
    assert recipe["train"][-1]["p_gate"] < 0.6 and recipe["valid"]["p_gate"] < 0.6


def test_before_the_fix_the_gate_stays_on_p_write(runs):
    """The contrast that makes the test above able to fail: fairseq's initial weights and live special outputs."""
    before = runs["before"]
    assert before["exit_code"] == 0 and "--exclude-special-outputs" not in before["command"]
    assert ["--weight-init", "fairseq"] == before["command"][before["command"].index("--weight-init") :][:2]
    assert before["train"][-1]["p_gate"] > 0.85 and before["valid"]["p_gate"] > 0.85
    assert runs["recipe"]["valid"]["loss"] < before["valid"]["loss"]
