"""fairseq_lexical_recipes/recipe.py: a recipe's runs as data (Recipe.planned_runs, each an execute.RunSpec), checked
without running anything: the papers' settings, a given lexicon, the lla rows' schedule and the Transformer family.
(The printed form of every command is pinned by test_dry_run.py's goldens.)"""

import pytest

from tests.helpers.recipes import planned, run_recipe, shown
from tests.helpers.toy_data import write_tiny_layouts


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
