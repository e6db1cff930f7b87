"""The example recipes (examples/*/run.sh, driven by the package fairseq_lexical_recipes) and the aggregation over
seeds.

The end-to-end tests (marked slow) run the real pipeline on tiny data with a few updates: they check that every
step runs and writes what it should, not the numbers."""

import json
import math
import os
import random
import re
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, examples_env
from tests.helpers.toy_data import scan_line, tree_state, write_tiny_layouts
from tests.helpers.recipes import ok, run_recipe

from lexical_offline.metrics.aggregate import (
    aggregate,
    aggregate_dir,
    find_score_files,
    flatten_scores,
    format_summary,
    mean_std,
)

TASKS = ("colors", "scan", "cogs", "eng_cmn")


# --------------------------------------------------------------------------------------------------------------
# Tiny data in the official layouts
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_scan(tmp_path):
    """brendenlake/SCAN layout: add_prim_split/tasks_{train,test}_addprim_jump.txt, 40 + 10 lines."""
    rng = random.Random(0)
    d = tmp_path / "SCAN" / "add_prim_split"
    d.mkdir(parents=True)
    (d / "tasks_train_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(40)))
    (d / "tasks_test_addprim_jump.txt").write_text("".join(scan_line(rng) + "\n" for _ in range(10)))
    return tmp_path / "SCAN"


# --------------------------------------------------------------------------------------------------------------
# Fast checks: help, errors, the commands each recipe would run (--dry-run)
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_help_lists_the_common_options(task):
    out = ok(run_recipe(task, "--help"))
    for option in ("--data", "--work", "--max-update", "--models", "--seeds", "--cpu-small", "--force"):
        assert option in out, option


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


def dry_run(task, data, *args):
    args = ("--data", data, *args) if data else args
    return ok(run_recipe(task, "--dry-run", *args, timeout=120))


def planned(task_name, data, *args):
    """(the Recipe, its runs as {(model, seed): RunSpec}) of `examples/<task>/run.sh [--data DATA] ARGS`, built in this
    process: the runs whose commands --dry-run prints, checked as data (the printed form is pinned by
    tests/recipes/test_dry_run.py's goldens)."""
    recipe = recipe_of(task_name, *(["--data", str(data)] if data else []), *args)
    return recipe, recipe.planned_runs()


def recipe_of(task_name, *argv):
    """The Recipe of `python -m fairseq_lexical_recipes TASK ARGV`, as fairseq_lexical_recipes.cli.main builds it
    (nothing run)."""
    from fairseq_lexical_recipes.cli import parse
    from fairseq_lexical_recipes.recipe import Recipe

    return Recipe(*parse([task_name, *map(str, argv)]))


def shown(runs, step="train"):
    """{model: the step's command as --dry-run shows it} of the seed-1 runs."""
    from fairseq_lexical_recipes.console import show

    return {model: show(run.commands[step]) for (model, seed), run in runs.items() if seed == 1}


def test_the_runs_carry_the_papers_settings(tmp_path):
    write_tiny_layouts(tmp_path)
    work = ("--work", tmp_path / "w")
    recipe, runs = planned("scan", tmp_path / "scan", "--split", "around_right", *work)
    # Appendix C.1 (+ the authors' scripts): 2x512, Noam lr 1.0 (peak 512^-0.5 * 4000^-0.5), batch 128 x 4, clip 5,
    # 8000 updates, validation every 500 updates; extra dropout 0.5 on p_write (lexical models) for SCAN.
    assert list(runs) == [(m, 1) for m in ("lstm", "simple", "pmi", "ibm2", "ibm1", "bayes")]
    assert runs["bayes", 1].who == "[6/6] bayes seed 1"
    train = shown(runs)
    assert "--arch lstm_plain " in train["lstm"] and "simple.tsv" in train["simple"]
    for opt in (
        "--lr 0.000698771",
        "--warmup-updates 4000",
        "--batch-size 128",
        "--update-freq 4",
        "--clip-norm 5.0",
        "--max-update 8000",
        "--validate-interval-updates 500",
        "--sentence-avg",
    ):
        assert opt in train["lstm"] and opt in train["simple"], opt
    assert "--write-dropout" not in train["lstm"] and "--write-dropout 0.5" in train["simple"]
    assert "--patience 10" in train["lstm"] and "--patience 20" in train["simple"]
    assert recipe.invocation.files["train"].endswith("tasks_train_template_around_right.txt")

    _, runs = planned("cogs", tmp_path / "cogs", *work)
    models = ("lstm", "copy", "simple", "pmi", "ibm2", "ibm1", "bayes", "uniform", "soft", "learned")
    assert [m for m, _ in runs] == list(models)
    train, generate, score = shown(runs), shown(runs, "generate"), shown(runs, "score")
    assert "--lexicon identity" in train["copy"] and "--lexicon uniform --lexicon-trainable" in train["uniform"]
    assert "--lexicon-temperature 0.1 " in train["soft"] and "--lexicon-trainable" not in train["soft"]
    assert "--lexicon-temperature 0.1 --lexicon-trainable" in train["learned"]
    assert not any("--write-dropout" in t for t in train.values())
    assert all("--max-len-b 512" in g for g in generate.values())
    assert all("--categories " + str(tmp_path / "cogs" / "gen.tsv") + " --cogs-table3" in c for c in score.values())

    recipe, runs = planned("eng_cmn", tmp_path / "eng_cmn", *work)
    assert all("--bleu --tokenize none --train-source" in c for c in shown(runs, "score").values())
    assert "--no-fallback" in " ".join(recipe.lexicon_command("simple"))
    assert ("ibm1", 1) in runs and ("bayes", 1) not in runs

    recipe, runs = planned("colors", None, "--models", "paper", "--cpu-small", *work)
    train = shown(runs)
    for opt in ("--arch lex_lstm_small", "--batch-size 5", "--max-update 560", "--disable-validation"):
        assert opt in train["simple"], opt
    assert "CPU-SMALL" in recipe.invocation.settings_label
    assert not (tmp_path / "w").exists()  # planning writes nothing


def test_a_given_lexicon_names_the_rows_that_read_it(tmp_path):
    """--lexicon FILE replaces the Simple rows' lexicon: their labels (config.json, summary, report) name the file,
    not "Simple", and the rows without a lexicon keep theirs. (--dry-run's "lexicons:" line, which says the file is
    not built, is pinned by the colors_given_lexicon golden.) A --lexicon that no model would read is refused."""
    from fairseq_lexical_recipes.console import RecipeError

    given = tmp_path / "cedict.tsv"
    given.write_text("a\tb\t1\n")
    recipe, runs = planned("colors", None, "--models", "lstm,simple,soft", "--lexicon", given, "--work", tmp_path / "w")
    labels = {model: run.config["label"] for (model, seed), run in runs.items() if seed == 1}
    assert labels["simple"] == "LSTM + Lex.: cedict.tsv (--lexicon) (--arch lex_lstm)"
    assert labels["soft"] == "LSTM + Lex.: cedict.tsv (--lexicon), Soft (tau 0.1) (--arch lex_lstm)"
    assert labels["lstm"] == recipe.label("lstm") and "Lex." not in labels["lstm"]
    recipe, _ = planned("colors", None, "--models", "simple", "--work", tmp_path / "w2")
    assert recipe.label("simple") == "LSTM + Lex.: Simple (--arch lex_lstm)"
    with pytest.raises(RecipeError, match=r"--lexicon .*cedict\.tsv: none of --models \(lstm, copy\) would read it"):
        planned("colors", None, "--models", "lstm,copy", "--lexicon", given, "--work", tmp_path / "w3")


def test_the_lla_runs_follow_thrush_schedule_metrics_and_damage(tmp_path):
    """lla / lla_noadv (Thrush 2020): one training call through the task lla_translation (Lexicon Unit epochs 1-30
    with batch 1, then to epoch 1000 with batch 30, Adam 0.001 constant), --thrush scoring, tools/damage.py with
    Table 2's groups."""
    from fairseq_lexical_recipes.console import show

    write_tiny_layouts(tmp_path)
    work = ("--work", tmp_path / "w")
    recipe, runs = planned("colors", None, "--models", "lla,lla_noadv", "--damage", *work)
    assert all(list(run.commands) == ["train", "generate", "score"] for run in runs.values())  # one training call
    train = shown(runs)
    for line in train.values():
        for opt in (
            "--arch lla_lstm ",
            "--lexicon-unit-epochs 30",
            "--lr 0.001 --lr-scheduler fixed",
            "--clip-norm 0",
            "--task lla_translation",
            "--lexicon-unit-batch-size 1 --batch-size 30 --max-epoch 1000",
        ):
            assert opt in line, opt
        assert "--write-dropout" not in line and "--warmup-updates" not in line
        # the Lexicon Unit with the lowest validation BCE is kept; Thrush's model selection: every epoch validated
        # on exact match (Colors: the training set), checkpoint_best.pt the first epoch with the best score
        assert (
            "--lexicon-unit-selection valid_bce --validate-interval 1 --save-interval 1 --best-checkpoint-metric "
            "lla_selection --maximize-best-checkpoint-metric --lla-selection-metric exact_match"
        ) in line and "--disable-validation" not in line
    assert "--no-adversary" in train["lla_noadv"] and "--no-adversary" not in train["lla"]
    damage = {m: show(recipe.damage_command(m, 1, run.out)) for (m, _), run in runs.items()}
    assert all(run.checkpoint.endswith("checkpoint_best.pt") for run in runs.values())
    assert all("checkpoint_best.pt" in d for d in damage.values())
    assert all("--thrush" in c for c in shown(runs, "score").values())
    assert "--damage none,lstm,lexicon,adversary --seed 1" in damage["lla"] and "wif kiki lug" in damage["lla"]
    assert "--damage none,lstm,lexicon --seed 1" in damage["lla_noadv"]  # no adversary to damage

    recipe, runs = planned("colors", None, "--models", "lla", "--lla-checkpoint", "last", *work)
    train = shown(runs)["lla"]
    assert "exact_match" not in train and "--disable-validation" in train
    assert "--lexicon-unit-selection last --disable-validation --save-interval 1000" in train
    assert runs["lla", 1].checkpoint.endswith("seed1/checkpoint_last.pt")

    recipe, runs = planned("colors", None, "--models", "lla", "--lla-max-epoch", "200", *work)
    assert (
        "--max-epoch 200" in shown(runs)["lla"]
        and not recipe.invocation.lla.is_paper()
        and recipe.invocation.damage is None
    )

    eng_data = tmp_path / "eng_cmn"
    _, runs = planned(
        "eng_cmn", eng_data, "--models", "lla", "--tokenization", "thrush", "--damage", "none,lexicon", *work
    )
    assert "--bleu --tokenize none" in shown(runs, "score")["lla"] and "--thrush" in shown(runs, "score")["lla"]
    assert "--validate-interval 1" in shown(runs)["lla"]
    assert (
        "--best-checkpoint-metric lla_selection --maximize-best-checkpoint-metric --lla-selection-metric bleu "
        "--eval-bleu"
    ) in shown(runs)["lla"]
    # --patience counts the Lexicon Unit epochs' validations too (lla_translation): fewer is refused
    proc = run_recipe("eng_cmn", "--data", eng_data, "--models", "lla", "--patience", "5", "--dry-run", *work)
    assert proc.returncode == 2 and "--patience 5 with the lla rows" in proc.stderr and "--patience 30" in proc.stderr
    _, runs = planned("eng_cmn", eng_data, "--models", "lla", "--patience", "30", "--lla-checkpoint", "last", *work)
    assert (
        "--lexicon-unit-selection last --validate-interval 1 --save-interval 1 --best-checkpoint-metric "
        "lla_selection --maximize-best-checkpoint-metric --lla-selection-metric loss --lla-selection-minimize "
        "--patience 30"
    ) in shown(runs)["lla"]

    _, runs = planned("cogs", tmp_path / "cogs", "--models", "all", *work)
    assert not any(m.startswith("lla") for m, _ in runs)  # 'all' = Akyurek & Andreas' models
    proc = run_recipe("cogs", "--data", tmp_path / "cogs", "--models", "lstm", "--damage", "--dry-run", *work)
    assert proc.returncode == 2 and "--damage applies to the lla models" in proc.stderr


def test_the_transformer_family_runs(tmp_path):
    """transformer, lex_transformer, pgn, dangle, rdangle_shr, rdangle_sep, rdangle_sep_o1: arch, interval, kv-mode,
    the joined dictionary of pgn; the _tiny archs under --cpu-small; not in 'all'."""
    from fairseq_lexical_recipes.console import show

    write_tiny_layouts(tmp_path)
    work = ("--work", tmp_path / "w")
    names = "transformer,lex_transformer,pgn,dangle,rdangle_shr,rdangle_sep,rdangle_sep_o1"
    recipe, runs = planned("cogs", tmp_path / "cogs", "--models", names, *work)
    train, gen = shown(runs), shown(runs, "generate")
    assert "--arch lex_transformer --lexicon none --encoder-embed-dim 512" in train["transformer"]
    assert (
        "--arch lex_transformer --lexicon " + str(tmp_path / "w" / "lexicons" / "simple.tsv")
        in train["lex_transformer"]
    )
    assert "--arch pgn_transformer --lexicon identity" in train["pgn"]
    assert "--arch dangle_transformer --kv-mode shared --reencode-interval 1 " in train["dangle"]
    assert "--arch rdangle_transformer_iwslt_de_en --kv-mode shared --reencode-interval 4 " in train["rdangle_shr"]
    assert "--arch rdangle_transformer_iwslt_de_en --kv-mode sep --reencode-interval 4 " in train["rdangle_sep"]
    assert "--arch rdangle_transformer_iwslt_de_en --kv-mode sep --reencode-interval 1 " in train["rdangle_sep_o1"]
    for m, line in train.items():
        for opt in (
            "--lr 0.0005",
            "--warmup-updates 4000",
            "--adam-betas '(0.9, 0.98)'",
            "--max-tokens 4096",
            "--label-smoothing 0.1",
            "--weight-decay 0.0001",
            "--max-update 30000",
            "--clip-norm 0 ",
        ):
            assert opt in line, (m, opt)
        assert "--sentence-avg" not in line and "--write-dropout" not in line
        joined = str(tmp_path / "w" / "bin_joined") + " "
        assert (joined in line and joined in gen[m]) == (m == "pgn"), m
    assert "--joined-dictionary" in show(recipe.preprocess_command(joined=True))
    assert "--joined-dictionary" not in show(recipe.preprocess_command(joined=False))

    recipe, runs = planned(
        "scan", tmp_path / "scan", "--split", "around_right", "--models", names, "--cpu-small", *work
    )
    train = " ".join(shown(runs).values())
    assert train.count("--arch lex_transformer_tiny") == 3 and train.count("--arch rdangle_transformer_tiny") == 4
    assert "--encoder-embed-dim" not in train and "--kv-mode sep --reencode-interval 4" in train
    assert train.count("--batch-size 64") == 7 and train.count("--max-update 2000") == 7
    assert "CPU-SMALL" in recipe.invocation.settings_label

    _, runs = planned("eng_cmn", tmp_path / "eng_cmn", "--models", "rdangle_sep,lstm", "--max-update", "123", *work)
    train = shown(runs)
    assert all("--max-update 123" in t for t in train.values()) and "--kv-mode sep" in train["rdangle_sep"]
    assert "bin_joined" not in " ".join(train.values())

    _, runs = planned("cogs", tmp_path / "cogs", "--models", "all", *work)
    everything = " ".join(shown(runs).values()) + " ".join(shown(runs, "generate").values())
    assert "--arch lex_transformer" not in everything and "rdangle" not in everything
    assert "bin_joined" not in everything


def test_thrush_tokenization_of_english_chinese():
    from fairseq_lexical_recipes.tasks.eng_cmn import thrush_tokenize_pair

    assert thrush_tokenize_pair("You &apos;d better take it , Tom .", "你 最好 带 把 伞 ,   Tom 123 .") == (
        "You ' d better take it , Tom .",
        "你 最 好 带 把 伞 , Tom 123 .",
    )


# --------------------------------------------------------------------------------------------------------------
# Aggregation over seeds
# --------------------------------------------------------------------------------------------------------------


def test_mean_std_on_hand_values():
    s = mean_std([0.5, 0.7, 0.9])
    assert s["mean"] == pytest.approx(0.7)
    assert s["std"] == pytest.approx(math.sqrt(0.08 / 3))  # population (ddof=0)
    assert s["std_sample"] == pytest.approx(0.2)  # ddof=1
    assert s["n"] == 3 and s["values"] == [0.5, 0.7, 0.9]
    one = mean_std([0.25])
    assert one["mean"] == 0.25 and one["std"] == 0.0 and one["std_sample"] is None
    with pytest.raises(ValueError):
        mean_std([])
    with pytest.raises(ValueError):
        mean_std([1.0, float("nan")])


def test_flatten_and_aggregate_score_dicts():
    s1 = {
        "n": 10,
        "exact_match": 0.8,
        "bleu": 20.0,
        "bleu_signature": "nrefs:1",
        "one_shot": {"n": 3, "exact_match": 0.0, "bleu": None},
        "cogs_table3": {"all": {"n": 10, "exact_match": 0.8}},
    }
    s2 = {
        "n": 10,
        "exact_match": 0.6,
        "bleu": 30.0,
        "one_shot": {"n": 3, "exact_match": 1.0, "bleu": 12.0},
        "cogs_table3": {"all": {"n": 10, "exact_match": 0.6}},
    }
    assert flatten_scores(s1) == {
        "exact_match": 0.8,
        "bleu": 20.0,
        "one_shot.exact_match": 0.0,
        "cogs_table3.all.exact_match": 0.8,
    }
    summary = aggregate({"simple": {1: s1, 2: s2}})
    m = summary["simple"]["metrics"]
    assert summary["simple"]["seeds"] == [1, 2]
    assert m["exact_match"]["mean"] == pytest.approx(0.7) and m["exact_match"]["std"] == pytest.approx(0.1)
    assert m["bleu"]["mean"] == pytest.approx(25.0) and m["bleu"]["std"] == pytest.approx(5.0)
    assert m["cogs_table3.all.exact_match"]["values"] == [0.8, 0.6]
    # a metric missing in one seed is summarised over the seeds that have it
    assert m["one_shot.bleu"]["n"] == 1 and m["one_shot.bleu"]["seeds"] == [2]
    table = format_summary(
        summary, [("exact_match", "EM")], labels={"simple": "Simple"}, paper={"simple": {"exact_match": (0.82, 0.01)}}
    )
    assert "Simple" in table and "0.70 +/- 0.10" in table and "0.82 +/- 0.01" in table


def test_aggregate_dir_and_command_line(tmp_path):
    for model, values in (("lstm", (0.1, 0.3)), ("simple", (0.9, 0.8))):
        for seed, value in enumerate(values, start=1):
            d = tmp_path / model / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "score.json").write_text(json.dumps({"n": 4, "exact_match": value}))
    (tmp_path / "lstm" / "seed3").mkdir()  # unfinished run: no score.json
    assert [(m, s) for m, s, _ in find_score_files(str(tmp_path))] == [
        ("lstm", 1),
        ("lstm", 2),
        ("simple", 1),
        ("simple", 2),
    ]
    summary = aggregate_dir(str(tmp_path), models=["simple", "lstm"], seeds=[1, 2])
    assert list(summary) == ["simple", "lstm"]
    assert summary["lstm"]["metrics"]["exact_match"]["mean"] == pytest.approx(0.2)
    assert summary["simple"]["metrics"]["exact_match"]["std"] == pytest.approx(0.05)

    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "aggregate_results.py"), str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0.20 +/- 0.10" in proc.stdout and "0.85 +/- 0.05" in proc.stdout
    data = json.loads(out.read_text())
    assert data["models"]["simple"]["metrics"]["exact_match"]["n"] == 2
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "aggregate_results.py"), str(tmp_path / "lstm" / "seed3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no <model>/seed<N>/score.json" in proc.stderr


# --------------------------------------------------------------------------------------------------------------
# End to end (slow)
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_colors_recipe_runs_end_to_end(tmp_path):
    """The README's main job on a very short schedule (the real one is 560 updates)."""
    out = ok(run_recipe("colors", "--max-update", "3", "--work", tmp_path))
    assert "lexicon (Simple rule, section 4.2): 4 entries" in out
    assert "LSTM (--arch lstm_plain)" in out and "LSTM + Lex.: Simple (--arch lex_lstm)" in out
    # Both models decoded all 10 test sentences (score.py checks the count against the reference).
    for model in ("lstm", "simple"):
        with open(tmp_path / model / "seed1" / "generate.txt") as f:
            assert sum(line.startswith("H-") for line in f) == 10
        assert (tmp_path / model / "seed1" / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_killing_the_recipe_stops_its_fairseq_train(tmp_path):
    """`kill` (SIGTERM) of a recipe must not leave its fairseq-train running on."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [
            "bash",
            os.path.join(REPO, "examples", "colors", "run.sh"),
            "--max-update",
            "100000",
            "--models",
            "lstm",
            "--work",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    log = tmp_path / "lstm" / "seed1" / "train.log"
    deadline = time.time() + 300
    while not (log.exists() and "num_updates" in log.read_text(errors="replace")):  # fairseq-train is training
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(1)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert children, "no fairseq-train child found"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (finished runs are kept" in err
    for pid in children:
        deadline = time.time() + 30
        while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
            time.sleep(0.5)
        assert not os.path.exists(f"/proc/{pid}"), f"fairseq-train (pid {pid}) still runs"


@pytest.mark.slow
def test_an_interrupted_colors_run_resumes_and_keeps_its_logs(tmp_path):
    """Colors trains without validation, so fairseq saved no checkpoint before the end: an interrupted run started
    again from update 0 and its log was deleted. It now saves one every 100 updates, resumes from it and appends
    to its log; a run stopped before its first checkpoint starts again with its log kept as train.log.1."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    run, cmd = (
        tmp_path / "lstm" / "seed1",
        [
            "bash",
            os.path.join(REPO, "examples", "colors", "run.sh"),
            "--cpu-small",
            "--models",
            "lstm",
            "--max-update",
            "100000",
            "--work",
            str(tmp_path),
        ],
    )
    log = run / "train.log"

    def text(path):
        return path.read_text(errors="replace") if path.exists() else ""

    def run_until(ready):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 400
        while not ready():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        return out

    run_until(lambda: "Saved checkpoint" in text(log))  # written at update 100
    first = text(log)
    config = json.loads((run / "config.json").read_text())
    assert "--save-interval-updates 100 --keep-interval-updates 1" in config["commands"]["train"]
    assert "--save-interval-updates" not in config["fingerprint"]["train"]  # earlier runs' fingerprints still match

    out = run_until(lambda: text(log).count("Saved checkpoint") >= 2 and "Loaded checkpoint" in text(log))
    assert "resuming training from" in out
    second = text(log)
    assert second.startswith(first)  # appended, not overwritten
    assert re.search(
        r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ [1-9]\d*00 updates\)", second[len(first) :]
    )

    for ckpt in run.glob("*.pt"):  # an attempt stopped before its first checkpoint
        ckpt.unlink()
    out = run_until(lambda: (run / "train.log.1").exists() and "num_updates" in text(log))
    assert "starting again (its logs kept: train.log.1)" in out
    assert text(run / "train.log.1") == second and "No existing checkpoint found" in text(log)


@pytest.mark.slow
def test_scan_recipe_two_models_two_seeds(tmp_path, tiny_scan):
    work = tmp_path / "work"
    # two pairs at a time on the two cores (one after the other: test_colors_recipe_runs_end_to_end)
    args = (
        "--data",
        tiny_scan,
        "--work",
        work,
        "--cpu-small",
        "--max-update",
        "20",
        "--models",
        "lstm,simple",
        "--seeds",
        "2",
        "--jobs",
        "2",
    )
    out = ok(run_recipe("scan", *args))
    assert "CPU-SMALL" in out and "1 of 40 training pairs held out" in out
    for model in ("lstm", "simple"):
        for seed in (1, 2):
            run = work / model / f"seed{seed}"
            score = json.loads((run / "score.json").read_text())
            assert score["n"] == 10 and 0.0 <= score["exact_match"] <= 1.0
            config = json.loads((run / "config.json").read_text())
            assert config["settings"] == "cpu-small" and config["seed"] == seed
            assert "--max-update 20" in config["commands"]["train"]
            assert json.loads((run / "run.json").read_text())["training"]["updates"] == 20
    summary = json.loads((work / "summary.json").read_text())
    assert summary["settings"] == "cpu-small" and summary["seeds"] == [1, 2]
    assert set(summary["models"]) == {"lstm", "simple"}
    for model in ("lstm", "simple"):
        em = summary["models"][model]["metrics"]["exact_match"]
        assert em["n"] == 2 and em["seeds"] == [1, 2] and "mean" in em and "std" in em
    assert summary["paper"]["simple"]["exact_match"] == [0.92, 0.17]
    assert json.loads((work / "config.json").read_text())["hparams"]["hidden"] == 128

    # Restartable (a second run skips the finished pairs: test_jobs_run_the_pairs_as_concurrent_recipes), and it
    # refuses to mix them with runs of other settings.
    proc = run_recipe(
        "scan",
        "--data",
        tiny_scan,
        "--work",
        work,
        "--cpu-small",
        "--max-update",
        "21",
        "--models",
        "lstm",
        "--seeds",
        "1",
    )
    assert proc.returncode == 2 and "other settings" in proc.stderr and "--force" in proc.stderr


@pytest.mark.slow
def test_jobs_run_the_pairs_as_concurrent_recipes(tmp_path, tiny_scan):
    """--jobs 3: every (model, seed) a child recipe after one preparation, which the children leave as it is (no
    data file rewritten); a failed pair is named with its log after the report over the others."""
    work = tmp_path / "work"
    common = ("--data", tiny_scan, "--work", work, "--cpu-small", "--max-update", "20", "--progress-every", "1")
    args = (*common, "--models", "lstm,simple", "--seeds", "2", "--jobs", "3")
    out = ok(run_recipe("scan", *args))
    pairs = [(model, seed) for seed in (1, 2) for model in ("lstm", "simple")]
    for k, (model, seed) in enumerate(pairs, 1):
        log = work / "jobs" / f"{model}_seed{seed}.log"
        assert f"[{k}/4] {model} seed {seed}: started (log {log})" in out
        assert re.search(
            rf"\[{k}/4\] {model} seed {seed}: ended \(exit 0, [^)]*\): seed {seed}  {model}  exact match", out
        ), out
        assert "exact match" in log.read_text()
        assert json.loads((work / model / f"seed{seed}" / "score.json").read_text())["n"] == 10
    assert "== jobs: 3 running" in out and "1 waiting" in out
    summary = json.loads((work / "summary.json").read_text())
    assert {m: summary["models"][m]["seeds"] for m in summary["models"]} == {"lstm": [1, 2], "simple": [1, 2]}
    assert "missing" not in summary
    config = json.loads((work / "config.json").read_text())  # the parent's, not a child's
    assert list(config["models"]) == ["lstm", "simple"] and config["seeds"] == [1, 2]
    data = sorted(p for p in (work / "data").iterdir() if p.name != ".owned_files.json")
    prepared = (work / "bin" / "prepared.json").stat().st_mtime_ns
    assert len(data) == 8 and all(p.stat().st_mtime_ns <= prepared for p in data)  # not rewritten by the children

    stats = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in data]
    again = ok(run_recipe("scan", *args))
    assert again.count("(done before: skipped)") == 4
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in data] == stats

    (work / "simple" / "seed3").write_text("")  # its run directory cannot be made: that child fails
    proc = run_recipe("scan", *common, "--models", "simple", "--seed-list", "1,3", "--jobs", "2")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "1 of 2 (model, seed) pairs failed" in proc.stderr
    assert f"simple seed 3 (exit 1): {work}/jobs/simple_seed3.log" in proc.stderr
    assert "[2/2] simple seed 3: FAILED (exit 1, " in proc.stdout
    assert "not in the table (no score.json): simple seed 3" in proc.stdout
    summary = json.loads((work / "summary.json").read_text())
    assert summary["missing"] == ["simple seed 3"] and summary["models"]["simple"]["seeds"] == [1]


def test_validation_exact_match_reads_the_fairseq_log(tmp_path):
    from fairseq_lexical_recipes.fairseq_log import validation_metric

    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-22 06:34:35 | INFO | valid | epoch 031 | valid on 'valid' subset | loss 4.1 | exact_match 0.5 | "
        "ppl 16.27 | num_updates 31\n"
        "2026-11-22 06:34:35 | INFO | train | epoch 031 | loss 4.3 | num_updates 31\n"
        "2026-11-22 06:34:36 | INFO | valid | epoch 032 | valid on 'valid' subset | loss 3.9 | exact_match 1 | "
        "ppl 15.0 | num_updates 32\n"
    )
    assert validation_metric(str(log)) == {31: 0.5, 32: 1.0}
    assert validation_metric(str(log), "ppl") == {31: 16.27, 32: 15.0}


FAKE_GENERATE = """
import os, sys, time
world = int(sys.argv[sys.argv.index("--distributed-world-size") + 1])
rank = int(sys.argv[sys.argv.index("--distributed-rank") + 1])
if rank == int(os.environ.get("FAIL_RANK", -1)):
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", 0)) * (rank == 0))
for i in range(rank, 7, world):  # fairseq deals batches out to the ranks; one sentence per batch here
    print(f"H-{i}\\t-0.5\\tw{i}")
print(f"rank {rank} threads {os.environ['OMP_NUM_THREADS']}", file=sys.stderr)
"""


def test_decode_jobs_split_generation_and_concatenate_the_shards(tmp_path, monkeypatch):
    import time

    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.process import run_sharded

    script = tmp_path / "fake_generate.py"
    script.write_text(FAKE_GENERATE)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    out, log = tmp_path / "generate.txt", tmp_path / "generate.log"
    run_sharded([sys.executable, script], 3, str(out), str(log))
    hyps = [line.split("\t")[0] for line in out.read_text().splitlines()]
    assert hyps == ["H-0", "H-3", "H-6", "H-1", "H-4", "H-2", "H-5"]  # rank order; every id once
    text = log.read_text()
    assert "== shard 2 of 3 (--distributed-rank 2) ==" in text and "rank 1 threads 1" in text  # 4 cores // 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake_generate.py", "generate.log", "generate.txt"]

    # a failing shard stops the others and is named, with its command
    monkeypatch.setenv("FAIL_RANK", "1")
    monkeypatch.setenv("SLEEP", "60")
    start = time.time()
    with pytest.raises(RecipeError, match=r"(?s)shard 1 of 2, failed \(exit 3\).*--distributed-rank 1"):
        run_sharded([sys.executable, script], 2, str(out), str(log))
    assert time.time() - start < 30


def test_each_program_gets_the_idle_cores_as_threads(monkeypatch):
    """Issue 70, defect 12: a custom run trained with torch's default threads (one per core); beside one other busy
    process it fell from 8,900 to 110-130 target tokens/s, 70x slower (docs/benchmarks.md)."""
    from fairseq_lexical_recipes import process

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for load, jobs, threads in ((0.2, 1, "4"), (1.7, 1, "2"), (3.9, 1, "1"), (0.0, 2, "2"), (2.0, 4, "1")):
        monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
        monkeypatch.setattr(process, "_IDLE_CORES", None)
        assert process.child_env(jobs)["OMP_NUM_THREADS"] == threads, (load, jobs)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stays
    assert process.child_env(2)["OMP_NUM_THREADS"] == "3"


def test_run_concurrently_limits_logs_and_reports_each_exit_status(tmp_path, monkeypatch):
    from fairseq_lexical_recipes import process

    monkeypatch.setattr(process, "PROGRESS_EVERY", 0.2)
    code = "import sys, time; time.sleep(0.5); print('job', sys.argv[1]); sys.exit(int(sys.argv[1]))"
    statuses = (0, 3, 0, 0)
    commands = [[sys.executable, "-c", code, status] for status in statuses]
    logs = [str(tmp_path / f"{i}.log") for i in range(len(commands))]
    running, most, ended, progress = set(), [0], [], []

    def on_start(i):
        running.add(i)
        most[0] = max(most[0], len(running))

    def on_end(i, status):
        running.remove(i)
        ended.append((i, status))

    def on_progress(running, done, waiting):
        progress.append((running, done, waiting))

    codes = process.run_concurrently(commands, logs, 2, on_start=on_start, on_end=on_end, on_progress=on_progress)
    assert codes == list(statuses) and sorted(ended) == list(enumerate(statuses)) and most[0] == 2
    assert [open(log).read() for log in logs] == [f"job {status}\n" for status in statuses]
    assert progress[0] == ([0, 1], [], [2, 3])


JOB_WITH_A_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def running(pid):
    """Whether the process runs (a zombie that this container's init leaves unreaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_an_interrupted_run_concurrently_stops_the_jobs_with_their_children(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM on a --jobs recipe: each running child recipe is stopped with its process group, so
    that its fairseq-train goes too."""
    import time

    from fairseq_lexical_recipes import process

    monkeypatch.setattr(process, "PROGRESS_EVERY", 0.2)
    script = tmp_path / "job.py"
    script.write_text(JOB_WITH_A_CHILD)
    pid_files = [tmp_path / f"child{i}.pid" for i in range(3)]

    def interrupt_once_started(running, done, waiting):
        if all(p.exists() for p in pid_files[:2]):
            raise KeyboardInterrupt

    start = time.time()
    with pytest.raises(KeyboardInterrupt):
        process.run_concurrently(
            [[sys.executable, script, p] for p in pid_files],
            [str(tmp_path / f"{i}.log") for i in range(3)],
            2,
            on_progress=interrupt_once_started,
        )
    assert time.time() - start < 30 and not pid_files[2].exists()  # the third never started
    for pid in (int(p.read_text()) for p in pid_files[:2]):
        deadline = time.time() + 10
        while running(pid) and time.time() < deadline:
            time.sleep(0.1)
        assert not running(pid), f"the job's child (pid {pid}) still runs"


def test_prepared_data_files_are_rewritten_only_when_they_change(tmp_path):
    from lexical_offline.textio import write_parallel

    pairs = [("jump twice", "I_JUMP I_JUMP"), ("walk", "I_WALK")]
    (tmp_path / "old.src").write_bytes(b"jump twice\nwalk\n")  # the bytes the data hashes of earlier work dirs saw
    (tmp_path / "old.tgt").write_bytes(b"I_JUMP I_JUMP\nI_WALK\n")
    write_parallel(str(tmp_path / "new"), pairs)
    files = [tmp_path / "new.src", tmp_path / "new.tgt"]
    assert [f.read_bytes() for f in files] == [(tmp_path / "old.src").read_bytes(), (tmp_path / "old.tgt").read_bytes()]
    stats = [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]
    write_parallel(str(tmp_path / "new"), pairs)
    assert [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files] == stats
    write_parallel(str(tmp_path / "new"), pairs + [("run", "I_RUN")])
    assert files[1].read_text() == "I_JUMP I_JUMP\nI_WALK\nI_RUN\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.src", "new.tgt", "old.src", "old.tgt"]


def test_jobs_must_be_positive_and_a_dry_run_says_how_many_pairs_run_at_once(tmp_path):
    proc = run_recipe("colors", "--work", tmp_path, "--jobs", "0", "--dry-run")
    assert proc.returncode == 2 and "--jobs must be >= 1, got 0" in proc.stderr
    out = dry_run("colors", None, "--work", tmp_path, "--seeds", "2", "--jobs", "3")
    assert "[4/4] simple seed 2:" in out
    assert "== --jobs 3: up to 3 of these 4 (model, seed) pairs would run at a time" in out


def test_importing_the_recipe_module_is_offline_and_leaves_the_environment_alone():
    """The recipe process imports only the offline package (fast start: neither fairseq nor torch) and sets no
    environment variable that the fairseq programs it starts would inherit."""
    code = (
        "import os, sys; import fairseq_lexical_recipes.cli; "
        "print(sorted(set(os.environ) ^ env_before), 'fairseq' in sys.modules, 'torch' in sys.modules)"
    )
    code = code.replace(
        "import fairseq_lexical_recipes.cli;", "env_before = set(os.environ); import fairseq_lexical_recipes.cli;"
    )
    env = examples_env()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "False", "False"]


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


def test_lla_selection_is_read_from_the_lla_translation_record(tmp_path):
    """Thrush: "to compute the Lexicon Unit to use, we measure its loss (BCE) on the validation set", and the model
    of the first epoch with the best validation score. lla_translation does both in its one call and writes what it
    measured to lla_selection.json; the recipe reads it (selection.json): the unit used, the epoch of the last
    finite lla_selection (checkpoint_best.pt). A run stopped within epochs 1..N+1 cannot resume (the unit's
    selection is not in the checkpoint): fairseq's own save lines say which epoch was saved."""

    from fairseq_lexical_recipes import lla
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.settings import LlaSettings

    def saved(epoch):
        name = "checkpoint_best.pt" if epoch % 2 else "checkpoint_last.pt"  # fairseq names the first file written
        return (
            f"2026-11-24 00:00:{epoch:02d} | INFO | fairseq.checkpoint_utils | Saved checkpoint "
            f"{tmp_path}/{name} (epoch {epoch} @ {epoch} updates, score -inf) (writing took 0.1 s)\n"
        )

    validations = {str(e): {"score": 0.1, "lla_selection": -math.inf, "num_updates": 10 * e} for e in (1, 2, 3)}
    for e, em, sel in ((4, 0.5, 0.5), (5, 0.75, 0.75), (6, 0.5, -math.inf), (7, 0.75, -math.inf)):
        validations[str(e)] = {"score": em, "lla_selection": sel, "num_updates": 30 + e}
    record = {
        "metric": "exact_match",
        "minimize": False,
        "lexicon_unit_epochs": 3,
        "lexicon_unit_selection": "valid_bce",
        "lexicon_unit": {
            "metric": "aux_lexicon",
            "epoch": 2,
            "aux_lexicon": 0.25,
            "curve": {"1": 0.9, "2": 0.25, "3": 0.4},
        },
        "validations": validations,
    }
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    settings = LlaSettings(lexicon_epochs=3)
    chosen = lla.selection(settings, str(tmp_path))
    assert (chosen["metric"], chosen["epoch"], chosen["exact_match"], chosen["last_epoch"], chosen["updates"]) == (
        "exact_match",
        5,
        0.75,
        7,
        35,
    )
    assert chosen["curve"] == {4: 0.5, 5: 0.75, 6: 0.5, 7: 0.75}
    unit = chosen["lexicon_unit"]
    assert (unit["epoch"], unit["aux_lexicon"], unit["curve"]) == (2, 0.25, {1: 0.9, 2: 0.25, 3: 0.4})
    (tmp_path / "train.log").write_text("".join(saved(e) for e in range(1, 8)))
    assert lla.Resumable(settings)(str(tmp_path))  # saved at epoch 7: resumes at 8 > N + 1
    # stopped after epoch 3 (= N): resuming at epoch 4 would be refused by lla_translation; start again
    (tmp_path / "train.log").write_text("".join(saved(e) for e in range(1, 4)))
    assert not lla.Resumable(settings)(str(tmp_path))
    assert lla.Resumable(LlaSettings(lexicon_epochs=3, checkpoint="last"))(str(tmp_path))
    # no unit used, no epoch after N, or no record at all: an error naming the file
    record["lexicon_unit"]["epoch"] = None
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    with pytest.raises(RecipeError, match="lla_selection.json has no Lexicon Unit selection"):
        lla.selection(settings, str(tmp_path))
    record["validations"] = {e: v for e, v in validations.items() if int(e) <= 3}
    (tmp_path / "lla_selection.json").write_text(json.dumps(record))
    with pytest.raises(RecipeError, match="lla_selection.json has no validation exact_match / lla_selection after"):
        lla.selection(settings, str(tmp_path))
    (tmp_path / "lla_selection.json").write_text(json.dumps({"metric": "exact_match"}))
    with pytest.raises(RecipeError, match="lla_selection.json: not lla_translation's selection record"):
        lla.selection(settings, str(tmp_path))
    (tmp_path / "lla_selection.json").unlink()
    with pytest.raises(RecipeError, match="lla_selection.json: file not found"):
        lla.selection(settings, str(tmp_path))


def test_runs_made_before_the_json_log_format_are_still_reused(tmp_path):
    """The recipes train with --log-format json since the package split; the log format changes no result, so a
    finished run whose fingerprint has the simple format (made before) is not "other settings"."""
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared

    write_tiny_layouts(tmp_path)
    recipe, prep = (
        recipe_of(
            "scan",
            "--data",
            str(tmp_path / "scan"),
            "--work",
            str(tmp_path / "w"),
            "--models",
            "lstm,lla",
            "--cpu-small",
        ),
        Prepared([], None, [], [], {}),
    )
    for model in ("lstm", "lla"):
        out = tmp_path / "w" / model / "seed1"
        out.mkdir(parents=True)
        commands = recipe.commands(model, 1, str(out))
        assert all("--log-format json" in " ".join(commands[k]) for k in commands if k.startswith("train"))
        before = {
            k: v.replace("--log-format json", "--log-format simple") if k.startswith("train") else v
            for k, v in recipe.fingerprint(model, commands, Inputs()).items()
        }
        (out / "score.json").write_text("{}")
        (out / "config.json").write_text(json.dumps({"fingerprint": before}))
        assert Runner(recipe).stale(model, 1, prep) is None
        before["train"] += " --dropout 0.5"  # but other settings are
        (out / "config.json").write_text(json.dumps({"fingerprint": before}))
        assert Runner(recipe).stale(model, 1, prep) == f"{out}: train differ"


def test_an_unfinished_run_with_a_checkpoint_and_other_settings_is_refused_not_deleted(tmp_path):
    """A run stopped at 8,000 of 12,000 updates was deleted and started again because its command line differed
    (the recipe said "run again to go on"): an unfinished run holding checkpoint_last.pt is refused like a finished
    one, its files untouched; with --force it starts again. One stopped before its first checkpoint has nothing to
    keep and is not refused."""
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared

    write_tiny_layouts(tmp_path)

    def recipe_for(*extra):
        return Runner(
            recipe_of(
                "scan", "--data", tmp_path / "scan", "--work", tmp_path / "w", "--models", "lstm", "--cpu-small", *extra
            )
        )

    recipe, prep = recipe_for(), Prepared([], None, [], [], {})
    out = tmp_path / "w" / "lstm" / "seed1"
    out.mkdir(parents=True)
    fp = recipe.recipe.fingerprint("lstm", recipe.recipe.commands("lstm", 1, str(out)), Inputs())
    fp["train"] += " --dropout 0.5"
    (out / "config.json").write_text(json.dumps({"fingerprint": fp}))
    assert recipe.stale("lstm", 1, prep) is None  # no checkpoint yet: starting again loses nothing
    (out / "checkpoint_last.pt").write_bytes(b"8000 updates")
    assert recipe.stale("lstm", 1, prep) == f"{out}: train differ"
    with pytest.raises(RecipeError, match="unfinished ones with a checkpoint.*\n.*train differ.*\n.*--force"):
        recipe.check_finished_runs(prep)
    assert (out / "checkpoint_last.pt").read_bytes() == b"8000 updates"
    assert recipe_for("--force").stale("lstm", 1, prep) is None


def test_a_rebuilt_lexicon_with_the_same_entries_is_the_same_lexicon(tmp_path):
    """Issue 55, defect 3: the lexicon's fingerprint held its header's timing, so restoring the data and re-running
    was refused ("lexicon differ"). Only the entries count; runs finished with the whole file's SHA-1 still match."""
    from fairseq_lexical_recipes.recipe import Inputs
    from fairseq_lexical_recipes.runner import Runner
    from fairseq_lexical_recipes.tasks import Prepared
    from fairseq_lexical_recipes.textio import sha1_files

    write_tiny_layouts(tmp_path)
    recipe, prep = (
        recipe_of(
            "scan", "--data", str(tmp_path / "scan"), "--work", str(tmp_path / "w"), "--models", "simple", "--cpu-small"
        ),
        Prepared([], None, [], [], {}),
    )
    lexicon = recipe.lexicon_path("simple")
    os.makedirs(os.path.dirname(lexicon), exist_ok=True)
    with open(lexicon, "w") as f:
        f.write("# method: simple seconds=0.553\njump\tI_JUMP\t1.0\n")
    out = tmp_path / "w" / "simple" / "seed1"
    out.mkdir(parents=True)
    fingerprint = recipe.fingerprint("simple", recipe.commands("simple", 1, str(out)), Inputs())
    (out / "score.json").write_text("{}")
    (out / "config.json").write_text(json.dumps({"fingerprint": fingerprint}))
    with open(lexicon, "w") as f:  # rebuilt: another timing, the same entries
        f.write("# method: simple seconds=0.47\njump\tI_JUMP\t1.0\n")
    assert Runner(recipe).stale("simple", 1, prep) is None
    (out / "config.json").write_text(json.dumps({"fingerprint": dict(fingerprint, lexicon_sha1=sha1_files([lexicon]))}))
    assert Runner(recipe).stale("simple", 1, prep) is None  # recorded before, as the whole file's SHA-1
    with open(lexicon, "w") as f:
        f.write("# method: simple seconds=0.47\njump\tI_WALK\t1.0\n")
    assert Runner(recipe).stale("simple", 1, prep) == f"{out}: lexicon differ"


@pytest.mark.slow
def test_lla_colors_keeps_the_first_best_epoch(tmp_path):
    """The lla row end to end on Colors with a short schedule, one fairseq-train call (lla_translation): the
    evaluated checkpoint_best.pt is the first epoch with the best validation exact match, the Lexicon Unit the one
    of the lowest validation BCE (selection.json, read from the log)."""
    import torch

    work = tmp_path / "w"
    proc = run_recipe(
        "colors",
        "--models",
        "lla",
        "--seeds",
        "1",
        "--lla-lexicon-epochs",
        "2",
        "--lla-max-epoch",
        "12",
        "--keep-checkpoints",
        "all",
        "--work",
        work,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = work / "lla" / "seed1"
    selection = json.loads((out / "selection.json").read_text())
    curve = {int(e): v for e, v in selection["curve"].items()}
    assert sorted(curve) == list(range(3, 13))  # every epoch after the Lexicon Unit ones
    best = max(curve.values())
    assert selection["metric"] == "exact_match" and selection["exact_match"] == best
    assert selection["epoch"] == min(e for e, v in curve.items() if v == best)
    state = torch.load(out / "checkpoint_best.pt", weights_only=False)
    position = state["extra_state"]["train_iterator"]  # saved at the end of an epoch: the next one, at 0
    assert (position["epoch"], position["iterations_in_epoch"]) == (selection["epoch"] + 1, 0)
    training = json.loads((out / "train.done").read_text())["training"]
    assert training["selected_epoch"] == selection["epoch"]
    if selection["epoch"] < 12:
        # the reported updates of the evaluated model are those of its epoch, not the whole run's
        assert training["selected_updates"] == state["optimizer_history"][-1]["num_updates"] < training["updates"]
        assert f"(update {training['selected_updates']}) of 12 evaluated" in training["text"]
    assert not (out / "train_selected.log").exists() and not (out / "checkpoint_lexicon_unit.pt").exists()
    assert "--task lla_translation" in json.loads((out / "config.json").read_text())["commands"]["train"]
    # the Lexicon Unit: the epoch (of 1..2) with the lowest validation BCE, frozen from epoch 3 on
    unit = selection["lexicon_unit"]
    unit_curve = {int(e): v for e, v in unit["curve"].items()}
    assert sorted(unit_curve) == [1, 2] and unit["metric"] == "aux_lexicon"
    assert unit_curve[unit["epoch"]] == min(unit_curve.values()) == unit["aux_lexicon"]
    final = torch.load(out / "checkpoint_last.pt", weights_only=False)["model"]
    names = [n for n in final if n.startswith("encoder.lexicon_unit.")]
    assert names and all(torch.equal(final[n], state["model"][n]) for n in names)
    assert json.loads((out / "score.json").read_text())["n"] == 10


@pytest.mark.slow
def test_an_interrupted_lla_run_starts_again_or_resumes(tmp_path):
    """lla_translation cannot resume within the Lexicon Unit epochs 1..N+1 (the selection of the unit is not in the
    checkpoint): an lla run stopped there starts again (its log kept as train.log.1); one stopped later resumes
    checkpoint_last.pt. Both end with the selection of an uninterrupted run."""
    import signal
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    # 40 Lexicon Unit epochs: a kill sent at epoch 2 must land within them on a fast idle machine too
    # and 250 epochs after them (one update each, a few seconds in all): the kill sent at epoch 45 must land before
    # the last (with 60, an idle machine ran epochs 45-60 in under a second and the kill came after the end)
    opts = ["--cpu-small", "--models", "lla", "--lla-lexicon-epochs", "40", "--lla-max-epoch", "300"]

    def recipe(work):
        return ["bash", os.path.join(REPO, "examples", "colors", "run.sh"), *opts, "--work", str(work)]

    def text(path):
        return path.read_text(errors="replace") if path.exists() else ""

    def run_until(work, saved_epoch):
        log = work / "lla" / "seed1" / "train.log"
        proc = subprocess.Popen(recipe(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 400
        while not re.search(rf"Saved checkpoint \S+\.pt \(epoch {saved_epoch} @", text(log)):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]

    def finish(work, proc=None):
        proc = proc or start(work)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        return out, json.loads((work / "lla" / "seed1" / "selection.json").read_text())

    def start(work):
        return subprocess.Popen(recipe(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    # two runs at a time (the uninterrupted one beside the interrupted ones)
    whole = start(tmp_path / "whole")
    run_until(tmp_path / "early", 2)  # within the Lexicon Unit epochs
    early = start(tmp_path / "early")
    _, reference = finish(tmp_path / "whole", whole)
    run_until(tmp_path / "late", 45)  # after epoch N + 1
    out, selection = finish(tmp_path / "early", early)
    assert "stopped within the Lexicon Unit epochs" in out and "starting again (its logs kept: train.log.1)" in out, out
    assert (tmp_path / "early" / "lla" / "seed1" / "train.log.1").exists()
    assert selection == reference
    out, selection = finish(tmp_path / "late")
    assert "resuming training from" in out
    loaded = re.search(
        r"Loaded checkpoint .*checkpoint_last\.pt \(epoch (\d+) @",
        text(tmp_path / "late" / "lla" / "seed1" / "train.log"),
    )
    assert loaded and 45 <= int(loaded.group(1)) < 300  # (the interruption lands some epochs after the 45th)
    assert selection == reference


def scan_recipe(tmp_path, *extra):
    """The Runner of a SCAN recipe on write_tiny_layouts' files (nothing trained), WORK = tmp_path/w."""
    from fairseq_lexical_recipes.runner import Runner

    if not (tmp_path / "scan").exists():
        write_tiny_layouts(tmp_path)
    return Runner(
        recipe_of(
            "scan", "--data", tmp_path / "scan", "--work", tmp_path / "w", "--models", "lstm", "--cpu-small", *extra
        )
    )


def test_the_recipes_delete_only_what_they_wrote(tmp_path):
    """Issue 55 defect 1, issue 70 defects 1-2: what is the pipeline's is decided by its record, not by names. A
    user's file of a name the pipeline writes stops it before anything is written; the user's other files stay."""
    from fairseq_lexical_recipes import ownership
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.rundir import remove_owned

    recipe = scan_recipe(tmp_path)
    prep = recipe.prepared_pairs()
    bin_dir, out, data = tmp_path / "w" / "bin", tmp_path / "w" / "lstm" / "seed1", tmp_path / "w" / "data"
    for d in (bin_dir, out, data):
        d.mkdir(parents=True)
    (bin_dir / "deploy.sh").write_text("echo x\n")
    (bin_dir / "dict.src.txt").write_text("old 1\n")
    (out / "NOTES.txt").write_text("mine\n")
    (out / "checkpoint_best.pt").write_bytes(b"mine")
    (data / "train.src").write_text("my own data\n")
    (tmp_path / "w" / "config.json").write_text('{"mine": true}')
    with pytest.raises(RecipeError) as refused:
        recipe.check_before_writing(prep)
    for name in ("w/config.json", "w/data/train.src", "w/bin/dict.src.txt"):
        assert str(tmp_path / name) in str(refused.value)
    assert "deploy.sh" not in str(refused.value) and "nothing was written" in str(refused.value)
    (data / "train.src").unlink(), (bin_dir / "dict.src.txt").unlink(), (tmp_path / "w" / "config.json").unlink()
    with pytest.raises(RecipeError, match=r"checkpoint_best.pt: not written by the pipeline"):
        recipe.check_before_writing(prep)
    assert sorted(p.name for p in out.iterdir()) == ["NOTES.txt", "checkpoint_best.pt"]
    # in a directory the pipeline wrote, a re-run removes its files only
    (out / "checkpoint_best.pt").unlink()
    with ownership.writing(str(out)):
        for name in ("config.json", "train.log", "checkpoint_last.pt", "generate.txt", "score.json"):
            (out / name).write_text("x")
    (out / "averaged.pt").write_text("mine")
    remove_owned(str(out))
    assert sorted(p.name for p in out.iterdir() if p.name != ownership.OWNED) == ["NOTES.txt", "averaged.pt"]


def test_one_recipe_at_a_time_in_a_work_directory(tmp_path):
    """Issue 55, defect 4: a second run on the same --work 'resumed' the first's training while it ran."""
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.rundir import lock_work_directory

    held = lock_work_directory(str(tmp_path))
    with pytest.raises(RecipeError, match=rf"--work {tmp_path} is in use by a running recipe \(pid {os.getpid()}"):
        lock_work_directory(str(tmp_path))
    held.close()  # the holder ends: the directory is free again
    lock_work_directory(str(tmp_path)).close()


def test_runs_of_other_data_are_refused_before_anything_is_written(tmp_path):
    """Issue 55, defect 2: a changed training file was refused only after WORK/data, the data-bin and the lexicons
    had been replaced, so the finished checkpoints no longer matched their data-bin."""
    from fairseq_lexical_recipes import ownership
    from fairseq_lexical_recipes.console import RecipeError
    from fairseq_lexical_recipes.textio import sha1_files

    recipe = scan_recipe(tmp_path)
    recipe.prepare()
    data = tmp_path / "w" / "data"
    parts = [str(data / f"{s}.{side}") for s in ("train", "valid", "test", "lexcorpus") for side in ("src", "tgt")]
    assert recipe.data_sha1 == sha1_files(parts)  # what finished runs recorded, computed before writing
    out = tmp_path / "w" / "lstm" / "seed1"
    with ownership.writing(str(out)):  # a run of the pipeline, finished
        (out / "score.json").write_text("{}")
        (out / "config.json").write_text(json.dumps({"fingerprint": {"data_sha1": "made from other data"}}))
    before = tree_state(tmp_path / "w")
    with pytest.raises(RecipeError, match=r"(?s)lstm/seed1: data differ.*nothing was written"):
        scan_recipe(tmp_path).prepare()
    assert tree_state(tmp_path / "w") == before


def test_a_test_set_of_unseen_tokens_is_reported_and_nfd_is_named():
    """Issue 55, defect 15: training in NFC and testing in NFD turned 64% of the test tokens into <unk>, shown only
    in preprocess.log."""
    import unicodedata

    from fairseq_lexical_recipes.vocabulary import out_of_vocabulary_notes

    words = ["café", "élan", "naïve", "déjà", "vu"]
    train = [(w, w.upper()) for w in words]
    assert out_of_vocabulary_notes(train, train) == []
    nfd = [(unicodedata.normalize("NFD", s), t) for s, t in train]
    (note,) = out_of_vocabulary_notes(train, nfd)
    assert note.startswith("warning: 80% of the test source tokens never occur in training")
    assert "differ in normalisation" in note
    (note,) = out_of_vocabulary_notes(train, [("zzz", "CAFÉ")])
    assert "100% of the test source" in note and "normalisation" not in note


@pytest.mark.parametrize(
    "argv",
    [
        ["colors"],
        [
            "scan",
            "--data",
            "/d",
            "--split",
            "around_right",
            "--cpu-small",
            "--models",
            "lstm,simple",
            "--seeds",
            "3",
            "--token-avg",
        ],
        [
            "cogs",
            "--data",
            "/d",
            "--gen",
            "gen_2020.tsv",
            "--cpu-medium",
            "--hidden",
            "256",
            "--lr",
            "0.003",
            "--patience",
            "0",
        ],
        [
            "eng_cmn",
            "--data",
            "/d",
            "--tokenization",
            "thrush",
            "--models",
            "lla",
            "--damage",
            "--lla-max-epoch",
            "40",
            "--force",
        ],
        [
            "scan",
            "--data",
            "/d",
            "--train-args",
            "--tf32 --weight-init fairseq",
            "--generate-args=--cpu",
            "--max-len-b",
            "64",
        ],
    ],
)
def test_options_spell_back_the_command_line_they_were_parsed_from(argv):
    """RecipeOptions.argv() (with the task's own, Task.argv()) is the command line of the --jobs children and the
    campaign's runs: it must parse back to the same options and task, whatever was given."""
    from fairseq_lexical_recipes.cli import parse

    task, options = parse(argv)
    again_task, again = parse([argv[0], *options.argv(), *task.argv()])
    assert again == options and type(again_task) is type(task) and again_task.argv() == task.argv()


def test_a_jobs_child_runs_its_pair_alone_with_the_parents_options(tmp_path):
    """--jobs N: each child is the parent's invocation with its one (model, seed), as a --jobs 1 --as-job process."""
    from fairseq_lexical_recipes.cli import parse
    from fairseq_lexical_recipes.jobs import job_command

    write_tiny_layouts(tmp_path)
    parent = recipe_of(
        "scan", "--data", tmp_path / "scan", "--split", "around_right", "--models", "lstm,simple", "--seeds", "2",
        "--cpu-small", "--jobs", "2", "--work", tmp_path / "w", "--train-args=--cpu",
    )  # fmt: skip
    command = job_command(parent.invocation, "simple", 2)
    assert command[1:4] == ["-m", "fairseq_lexical_recipes", "scan"]
    task, options = parse(command[3:])
    assert task.split == "around_right" and (options.models, options.seed_list, options.jobs) == ("simple", "2", 1)
    assert options.as_job and options.work == str(tmp_path / "w") and options.train_args == "--cpu"
    assert options.but(models="lstm,simple", seed_list=None, seeds=2, jobs=2, as_job=False) == parent.invocation.options


@pytest.mark.slow
def test_replicas_on_train_each_rows_seeds_together_and_keep_each_seeds_results(tmp_path, tiny_scan):
    """--replicas on: an LSTM row's seeds trained by one fairseq-train --replica-seeds; each seed's run directory,
    score.json, run.json and the summary as a run alone leaves them; a second invocation reuses them."""
    import torch

    work = tmp_path / "work"
    args = ("--data", tiny_scan, "--work", work, "--cpu-small", "--max-update", "20", "--models", "simple,pgn")
    planned = ok(run_recipe("scan", *args, "--seeds", "2", "--replicas", "on", "--dry-run"))
    assert "== simple seeds 1,2: trained together first (--replicas), then decoded one by one:" in planned
    assert f"--replica-seeds 1,2 --replica-dirs '{work}/simple/seed{{seed}}'" in planned
    assert "== pgn seeds" not in planned  # a Transformer row: each seed alone
    out = ok(run_recipe("scan", *args[:-1], "simple", "--seeds", "2", "--replicas", "on"))
    for model in ("simple",):
        assert f"{model} seeds 1,2: training together (--replica-seeds) (20 updates max)" in out
        group = json.loads((work / model / "replicas-1-2" / "config.json").read_text())
        assert "--replica-seeds 1,2" in group["command"] and f"{work}/{model}/seed{{seed}}" in group["command"]
        assert not list((work / model / "replicas-1-2").glob("*.pt"))  # (the stacked ones: for a resume only)
        for seed in (1, 2):
            run = work / model / f"seed{seed}"
            assert f"{model} seed {seed}: trained with seeds 1, 2 together, decoding {run}/checkpoint_last.pt" in out
            assert json.loads((run / "score.json").read_text())["n"] == 10
            training = json.loads((run / "run.json").read_text())["training"]
            assert training["updates"] == 20 and training["replicas"]["seeds"] == [1, 2]
            saved = torch.load(run / "checkpoint_last.pt", map_location="cpu", weights_only=False)
            assert saved["cfg"]["common"]["seed"] == seed and saved["cfg"]["task"]["replica_seeds"] is None
    summary = json.loads((work / "summary.json").read_text())
    assert {m: summary["models"][m]["seeds"] for m in summary["models"]} == {"simple": [1, 2]}
    again = ok(run_recipe("scan", *args[:-1], "simple", "--seeds", "2", "--replicas", "on"))
    assert again.count("(done before: skipped)") == 2 and "training together" not in again
