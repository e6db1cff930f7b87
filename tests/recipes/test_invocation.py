"""fairseq_lexical_recipes/invocation.py: every option checked in one place before anything is written (the data
files, the models, the bounds of numbers, --work, the extra fairseq options by fairseq's own parsers, the CPU sizes),
each refusal an error naming the option, exit status 2, no traceback."""

import pytest

from tests.helpers.recipes import dry_run, planned, run_recipe, shown


@pytest.mark.parametrize(
    "task,missing",
    [
        ("scan", "tasks_train_addprim_jump.txt"),
        ("cogs", "train.tsv"),
        ("eng_cmn", "cmn.txt_train_tokenized.tsv"),
        ("colors", "train.tsv"),
    ],
)
def test_missing_data_file_is_named(tmp_path, task, missing):
    proc = run_recipe(task, "--data", tmp_path, "--work", tmp_path / "work")
    assert proc.returncode == 2
    assert missing in proc.stderr and str(tmp_path) in proc.stderr, proc.stderr
    assert not (tmp_path / "work").exists()


def test_unknown_model_is_an_error(tmp_path):
    proc = run_recipe("colors", "--models", "lstm,nope", "--work", tmp_path)
    assert proc.returncode == 2 and "unknown model 'nope'" in proc.stderr


def test_a_work_directory_below_a_file_is_an_error(tmp_path):
    """Issue 70, defect 10: --work afile.txt/sub ended in a traceback."""
    (tmp_path / "afile.txt").write_text("mine\n")
    proc = run_recipe("colors", "--work", tmp_path / "afile.txt" / "sub")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{tmp_path}/afile.txt is a file, not a directory" in proc.stderr


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--train-args", "--foo bar", "fairseq-train (lstm) says: unrecognized arguments: --foo bar"),
        ("--generate-args", "--beam-search bogus", "fairseq-generate (lstm) says: argument --beam-search: invalid"),
    ],
)
def test_extra_fairseq_options_are_checked_by_fairseq_before_anything_runs(tmp_path, option, value, said):
    """Issue 70, defect 9: both passed --dry-run; the generate error came after the first model had trained."""
    for extra in (["--dry-run"], []):
        proc = run_recipe("colors", "--work", tmp_path / "w", f"{option}={value}", *extra)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr and not (tmp_path / "w").exists()


def test_jobs_must_be_positive_and_a_dry_run_says_how_many_pairs_run_at_once(tmp_path):
    proc = run_recipe("colors", "--work", tmp_path, "--jobs", "0", "--dry-run")
    assert proc.returncode == 2 and "--jobs must be >= 1, got 0" in proc.stderr
    out = dry_run("colors", None, "--work", tmp_path, "--seeds", "2", "--jobs", "3")
    assert "[4/4] simple seed 2:" in out
    assert "== --jobs 3: up to 3 of these 4 (model, seed) pairs would run at a time" in out


def test_decode_jobs_must_be_positive(tmp_path):
    proc = run_recipe("colors", "--work", tmp_path, "--decode-jobs", "0", "--dry-run")
    assert proc.returncode == 2 and "--decode-jobs must be >= 1, got 0" in proc.stderr


def test_cpu_presets_refuse_a_hidden_size_without_an_arch():
    """A task's CPU hidden size picks the LSTM arch (lex_lstm_small: 128, lex_lstm_medium: 256); another size is
    a clear error, not a KeyError or a silently different model."""
    from dataclasses import replace
    from types import SimpleNamespace

    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.options import RecipeOptions
    from fairseq_lexical_recipes.settings import PRESETS, effective_hparams

    args = RecipeOptions(preset="cpu-small")
    task = SimpleNamespace(name="toy", hparams=lambda preset: replace(PRESETS[preset], hidden=64))
    with pytest.raises(RecipeError, match="toy: no CPU-sized LSTM arch has 64 units"):
        effective_hparams(task, args)
    task.hparams = lambda preset: replace(PRESETS[preset], hidden=256)
    assert effective_hparams(task, args).hidden == 256
    args = args.but(preset="paper")  # the paper's arch has its own size, whatever the label
    task.hparams = lambda preset: replace(PRESETS[preset], hidden=64)
    assert effective_hparams(task, args).hidden == 64


def test_hidden_picks_the_cpu_arch_and_scales_the_lr(tmp_path, tiny_scan):
    """--hidden 256: the _medium archs, and the lr of the Noam schedule for d = 256 (d^-0.5: 0.0044 -> 0.003125)
    unless --lr; refused with the paper's settings, whose arch has its own size."""
    work = ("--work", tmp_path / "work")
    out = dry_run("scan", tiny_scan, *work, "--cpu-medium", "--hidden", "256", "--models", "lstm,simple")
    assert "== lstm, simple: 256-unit 2-layer LSTM, batch 64 x 1, lr 0.00313 (inverse sqrt, 400 warm-up)" in out
    _, runs = planned("scan", tiny_scan, *work, "--cpu-medium", "--hidden", "256", "--models", "lstm,simple")
    train = shown(runs)
    assert "--arch lstm_plain_medium" in train["lstm"] and "--arch lex_lstm_medium" in train["simple"]
    assert all("--lr 0.003125 " in t for t in train.values())
    _, runs = planned("scan", tiny_scan, *work, "--cpu-small", "--hidden", "256", "--lr", "0.001", "--models", "simple")
    assert "--arch lex_lstm_medium" in shown(runs)["simple"] and "--lr 0.001 " in shown(runs)["simple"]
    refused = run_recipe("scan", "--data", tiny_scan, *work, "--dry-run", "--hidden", "256")
    assert refused.returncode == 2 and "--hidden picks a CPU-sized LSTM arch" in refused.stderr
    refused = run_recipe("scan", "--data", tiny_scan, *work, "--dry-run", "--cpu-medium", "--hidden", "64")
    assert refused.returncode == 2 and "invalid choice: 64" in refused.stderr
