"""Through the real command-line programs with --user-dir: preprocess, train, resume, generate, interactive."""

import os
import re
import shutil

import pytest
import torch

from conftest import REPO, run_cli, needs_safe_loading

pytestmark = pytest.mark.slow
USER_DIR = os.path.join(REPO, "fairseq_lexical")


def train(data_bin, save_dir, lexicon, max_update):
    return run_cli(
        "fairseq-train",
        data_bin,
        "--user-dir",
        USER_DIR,
        "--arch",
        "lex_lstm_small",
        "--lexicon",
        lexicon,
        "--criterion",
        "lexical_cross_entropy",
        "--optimizer",
        "adam",
        "--lr",
        "0.005",
        "--batch-size",
        "8",
        "--max-update",
        max_update,
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--num-workers",
        "0",
        "--log-format",
        "simple",
        "--log-interval",
        "5",
        "--seed",
        "3",
    )


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("cli")
    lexicon = work / "lexicon.tsv"
    shutil.copy(toy_data / "lexicon.tsv", lexicon)
    first = train(toy_data / "bin", work / "ckpt", lexicon, 20)
    second = train(toy_data / "bin", work / "ckpt", lexicon, 30)
    lexicon.unlink()  # from here on, nothing may need the lexicon file
    return work, first.stdout + first.stderr, second.stdout + second.stderr


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


def test_generate_beam5_translates_every_sentence_without_the_lexicon_file(toy_data, trained):
    work, _, _ = trained
    # 20 test sentences in batches of 16: stock fairseq-fixed would drop the last 4 (not a multiple of 8).
    proc = run_cli(
        "fairseq-generate",
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        work / "ckpt" / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--batch-size",
        "16",
    )
    hyps = [line for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert len(hyps) == 20
    assert sorted(int(h.split("\t")[0][2:]) for h in hyps) == list(range(20))
    assert "Translated 20 sentences" in proc.stdout + proc.stderr


def test_generation_split_over_processes_equals_one_process(toy_data, trained, tmp_path, monkeypatch):
    """The recipes' --decode-jobs: fairseq-generate's ranks decode the same batches as one process would (5 batches
    of 4, dealt 3 + 2), so the hypotheses and their scores are the same."""
    import sys

    from recipes.process import run_sharded

    work, _, _ = trained
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "fairseq-generate"),
        toy_data / "bin",
        "--user-dir",
        USER_DIR,
        "--path",
        work / "ckpt" / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--batch-size",
        "4",
        "--num-workers",
        "0",
    ]
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
