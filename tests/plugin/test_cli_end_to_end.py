"""Through the real command-line programs with --user-dir: preprocess, train, resume, generate, interactive."""

import math
import os
import re
import shutil

import pytest
import torch

from tests.helpers.tiny_runs import TINY_RUNS, tiny_generate_args
from tests.helpers.environment import USER_DIR, needs_safe_loading, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def matrix(tiny_runs):
    """The session's runs, every run of the configuration matrix trained side by side and decoded with beam 5."""
    tiny_runs.prepare(TINY_RUNS, ["beam5"])
    return tiny_runs


@pytest.fixture(scope="module")
def trained(toy_data, matrix, tmp_path_factory):
    """The session's lex_lstm run (20 updates) and its resumption: a copy of its checkpoint trained on to 30."""
    run = matrix("lex_lstm")
    work = tmp_path_factory.mktemp("cli")
    (work / "ckpt").mkdir()
    shutil.copy(run.checkpoint, work / "ckpt" / "checkpoint_last.pt")
    lexicon = work / "lexicon.tsv"
    shutil.copy(toy_data / "lexicon.tsv", lexicon)
    second = run_cli(
        "fairseq-train", *TINY_RUNS["lex_lstm"].train_args(toy_data / "bin", work / "ckpt", lexicon, updates=30)
    )
    lexicon.unlink()  # from here on, nothing may need the lexicon file
    return work, run.log, second.stdout + second.stderr


def test_training_logs_loss_and_mean_gate(trained):
    _, log, _ = trained
    assert re.search(
        r"valid on 'valid' subset \| loss [\d.]+ \| nll_loss [\d.]+ \| p_gate [\d.]+ \| exact_match [\d.]+ \| ppl", log
    )
    assert "lexicon" in log and "entries used: 6" in log


@needs_safe_loading
def test_resume_continues_from_checkpoint_last(trained):
    work, _, log = trained
    assert re.search(r"loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 20 updates\)", log, re.IGNORECASE)
    assert "num_updates 30" in log
    ckpt = work / "ckpt" / "checkpoint_last.pt"
    state = torch.load(ckpt)
    assert state["cfg"]["model"].lexicon_stored_in_checkpoint
    # The allow-list of compat.py covers what fairseq checkpoints contain, and nothing more is needed.
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt))) <= {"argparse.Namespace"}


@pytest.mark.parametrize("family", list(TINY_RUNS))
def test_train_then_generate_from_the_checkpoint_alone(matrix, family):
    """fairseq-train logs the criterion's metrics in validation (p_gate where the model has a lexical head), and
    fairseq-generate translates all 20 test sentences from the checkpoint alone (the run's lexicon file is gone) in
    batches of 16: stock fairseq-fixed would drop the last 4 (not a multiple of 8)."""
    run = matrix(family, "beam5")
    gate = "" if family == "lla_lstm" else r"p_gate [\d.]+ \| "
    assert re.search(
        rf"valid on 'valid' subset \| loss [\d.]+ \| nll_loss [\d.]+ \| {gate}exact_match [\d.]+ \|", run.log
    )
    assert not (run.dir.parent / "lexicon.tsv").exists()
    output = run.generate("beam5")
    hyps = [line for line in output.splitlines() if line.startswith("H-")]
    assert sorted(int(h.split("\t")[0][2:]) for h in hyps) == list(range(20))
    assert all(math.isfinite(float(h.split("\t")[1])) for h in hyps)
    assert "Translated 20 sentences" in output


def test_generation_split_over_processes_equals_one_process(toy_data, trained, tmp_path, monkeypatch):
    """The recipes' --decode-jobs: fairseq-generate's ranks decode the same batches as one process would (5 batches
    of 4, dealt 3 + 2), so the hypotheses and their scores are the same."""
    import sys

    from fairseq_lexical_recipes.process import run_sharded

    work, _, _ = trained
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    program = os.path.join(os.path.dirname(sys.executable), "fairseq-generate")
    options = ("--beam", "5", "--batch-size", "4", "--num-workers", "0")
    cmd = [program, *tiny_generate_args(toy_data / "bin", work / "ckpt" / "checkpoint_last.pt", *options)]
    outputs = {}
    for jobs in (1, 2):
        out = tmp_path / f"generate{jobs}.txt"
        run_sharded(cmd, jobs, str(out), str(tmp_path / f"generate{jobs}.log"))
        outputs[jobs] = sorted(line for line in out.read_text().splitlines() if line[:2] in ("H-", "P-", "S-"))
    assert len([line for line in outputs[1] if line.startswith("H-")]) == 20
    assert outputs[2] == outputs[1]
    log = (tmp_path / "generate2.log").read_text()
    assert log.count("Translated") == 2 and "== shard 1 of 2" in log


def test_interactive_from_the_checkpoint_alone(toy_data, trained):
    work, _, _ = trained
    proc = run_cli(
        "fairseq-interactive",
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        work / "ckpt" / "checkpoint_last.pt",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--beam",
        "5",
        input="a1 and a2\na3 twice\n",
    )
    assert len([line for line in proc.stdout.splitlines() if line.startswith("H-")]) == 2


def test_installed_package_registers_everything_without_user_dir(tmp_path):
    """`pip install` users import the package (no --user-dir): the same registrations happen."""
    import subprocess
    import sys

    code = (
        "import fairseq_lexical, os; from fairseq.models import ARCH_MODEL_REGISTRY;"
        "from fairseq.criterions import CRITERION_REGISTRY;"
        "assert {'lex_lstm', 'lex_lstm_small', 'lex_lstm_medium', 'lstm_plain', 'lstm_plain_small',"
        " 'lstm_plain_medium'} <= set(ARCH_MODEL_REGISTRY);"
        "assert 'lexical_cross_entropy' in CRITERION_REGISTRY; print(os.path.dirname(fairseq_lexical.__file__))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("fairseq_lexical")


def test_offline_package_imports_neither_fairseq_nor_torch_and_the_plugin_registers_on_import(tmp_path):
    """lexical_offline (lexicons, metrics, corpus, the offline programs) is importable without fairseq's start-up;
    importing fairseq_lexical registers the models with no environment variable or explicit call."""
    import subprocess
    import sys

    offline = (
        "import sys, lexical_offline.metrics, lexical_offline.lexicon, lexical_offline.cli.score, "
        "lexical_offline.cli.build_lexicon; assert 'fairseq' not in sys.modules and 'torch' not in sys.modules"
    )
    plugin = (
        "import fairseq_lexical; from fairseq.models import ARCH_MODEL_REGISTRY;"
        "assert 'lex_lstm' in ARCH_MODEL_REGISTRY"
    )
    for code in (offline, plugin):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, (code, proc.stderr[-2000:])
