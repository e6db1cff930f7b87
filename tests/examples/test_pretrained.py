"""examples/pretrained (a stock Transformer pretrained, then fine-tuned with the head on a slice holding new-domain
words): the split's rules, the --dry-run commands on a tiny synthetic prepared directory, the refusals, and
commands.fairseq_train's stock form. Nothing is trained (fast; no ../shared data needed)."""

import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

from tests.helpers.environment import REPO, examples_env

RUN = os.path.join(REPO, "examples", "pretrained", "run.py")


def load_run_module():
    spec = importlib.util.spec_from_file_location("pretrained_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_example(*args):
    env = examples_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, env=env, timeout=60)


def toy_sources(n=300, seed=0):
    """Sentences over a few frequent words and many rare ones (document frequencies 1..8)."""
    rng = random.Random(seed)
    common = ["the", "a", "is", "of", "and"]
    rare = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(120)]
    return [" ".join(rng.sample(common, 3) + rng.sample(rare, 2) + [".", str(i)]) for i in range(n)]


def make_prepared(root, n_train=300, n_test=40):
    data = root / "data"
    data.mkdir(parents=True)
    splits = {"train": toy_sources(n_train, 0), "valid": toy_sources(n_test, 1), "test": toy_sources(n_test, 2)}
    for name, sources in splits.items():
        (data / f"{name}.src").write_text("\n".join(sources) + "\n")
        (data / f"{name}.tgt").write_text("\n".join(f"T {s}" for s in sources) + "\n")
    return root


def test_split_rules():
    run = load_run_module()
    sources = toy_sources()
    part = run.draw_split(sources, 40, 3, 6, seed=1)
    words = set(part["words"])
    df = run.document_frequency(sources)
    assert words and all(w.isalpha() and 3 <= df[w] <= 6 for w in words)
    ft, out, pre = set(part["finetune"]), set(part["left_out"]), set(part["pretrain"])
    assert len(ft) == 40 and not ft & out and not ft & pre and not out & pre
    assert ft | out | pre == set(range(len(sources)))
    assert all(words & set(sources[i].split()) for i in ft | out)  # every slice / left-out pair holds a drawn word
    assert not any(words & set(sources[i].split()) for i in pre)  # pretraining never sees one
    # drawing stops at the first word that brings the pairs holding one to the size
    before_last = run.holding_any(sources, set(part["words"][:-1]))
    assert len(before_last) < 40 <= len(ft | out)
    assert run.draw_split(sources, 40, 3, 6, seed=1) == part  # seeded
    assert run.draw_split(sources, 40, 3, 6, seed=2)["words"] != part["words"]


def test_split_too_few_pairs_is_one_error():
    run = load_run_module()
    with pytest.raises(run.RecipeError, match="fewer than --finetune-size"):
        run.draw_split(toy_sources(), 10000, 3, 6, seed=1)


def test_dry_run_commands(tmp_path):
    prepared = make_prepared(tmp_path / "prepared")
    work = tmp_path / "work"
    args = ["--prepared", str(prepared), "--work", str(work), "--finetune-size", "30", "--max-df", "6", "--dry-run"]
    r = run_example(*args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not work.exists()  # a dry run writes nothing
    out = r.stdout
    assert "finetune_pairs: 30" in out and "pretrain_pairs:" in out and "test_holding_a_new_word:" in out
    lines = out.splitlines()

    def command(name):
        return lines[lines.index(f"-- {name}:") + 1]

    pre = command("pretrained train")
    assert "--user-dir" not in pre and "--criterion label_smoothed_cross_entropy" in pre
    assert "--arch transformer_tiny" in pre and "--lr 0.001" in pre and "--warmup-updates 400" in pre
    assert "--max-update 3000" in pre and "--validate-interval-updates 500" in pre and "--patience" not in pre
    checkpoint = f"--finetune-from-model {work}/pretrained/checkpoint_best.pt"
    plain = command("plain seed 1 train")
    # fairseq's own model and criterion; --user-dir only for the plugin's checkpoint-loading fix (torch >= 2.6)
    assert checkpoint in plain and "--criterion label_smoothed_cross_entropy" in plain and "--lexicon" not in plain
    assert "--arch transformer_tiny" in plain and plain.count("--user-dir") == 1
    for seed in (1, 2, 3):
        pgn = command(f"pgn seed {seed} train")
        assert "--user-dir" in pgn and "--arch pgn_transformer --lexicon identity" in pgn and checkpoint in pgn
        assert f"--seed {seed} " in pgn and "--criterion lexical_cross_entropy --label-smoothing 0.1" in pgn
        assert "--lr 0.0003" in pgn and "--patience 3" in pgn and "--validate-interval-updates 100" in pgn
    lex = command("lex seed 1 train")
    assert f"--arch lex_transformer --lexicon {work}/lexicon.tsv --lexicon-top-k 8" in lex
    # the lexicon and the dictionary are learned on pretraining + fine-tuning text (data/train), never the input's
    assert f"--src {work}/data/train.src" in command("lexicon") and "--method ibm1" in command("lexicon")
    assert f"--trainpref {work}/data/train " in command("dictionary") + " "
    for part in ("pretrain", "finetune"):
        b = command(f"binarise {part}")
        assert f"--trainpref {work}/data/{part} " in b and f"--srcdict {work}/dict/dict.src.txt" in b
        assert "--joined-dictionary" in b
    score = command("lex seed 1 score")
    assert "--tokenize none" in score and f"--terms {work}/terms.tsv" in score
    assert command("pretrained generate").count("--path") == 1


def test_gate_bias_variants(tmp_path):
    prepared = make_prepared(tmp_path / "prepared")
    args = ["--prepared", str(prepared), "--work", str(tmp_path / "work"), "--finetune-size", "30", "--max-df", "6"]
    r = run_example(*args, "--dry-run", "--systems", "pgn_b2,lex_b2", "--seeds", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    for system in ("pgn_b2", "lex_b2"):
        train = lines[lines.index(f"-- {system} seed 1 train:") + 1]
        assert "--pretrained-gate-bias 2.2" in train and "--user-dir" in train
    r = run_example(*args, "--dry-run", "--systems", "plain,nope")
    assert r.returncode == 2 and "unknown nope" in r.stderr


def test_missing_prepared_is_named(tmp_path):
    r = run_example("--prepared", str(tmp_path / "nowhere"), "--work", str(tmp_path / "work"))
    assert r.returncode == 2 and r.stderr.count("error:") == 1
    assert str(tmp_path / "nowhere" / "data" / "train.src") in r.stderr and "--prepare-only" in r.stderr


@pytest.mark.parametrize("where", ["", "data", "data/sub"])
def test_work_on_an_input_is_refused(tmp_path, where):
    prepared = make_prepared(tmp_path / "prepared")
    r = run_example("--prepared", str(prepared), "--work", str(prepared / where) if where else str(prepared))
    assert r.returncode == 2 and "--work" in r.stderr and "input" in r.stderr
    assert sorted(os.listdir(prepared)) == ["data"]


def test_fairseq_train_stock_form():
    from fairseq_lexical_recipes import commands
    from fairseq_lexical_recipes.settings import TRANSFORMER_CPU_SMALL

    training = commands.transformer_training(TRANSFORMER_CPU_SMALL)
    plugin = commands.fairseq_train("BIN", ["--arch", "x"], 1, "OUT", **training)
    stock = commands.fairseq_train("BIN", ["--arch", "x"], 1, "OUT", **training, plugin=False)
    assert plugin[2:4] == ["--user-dir", commands.USER_DIR] and "lexical_cross_entropy" in plugin
    assert "--user-dir" not in stock and "lexical_cross_entropy" not in stock
    assert stock[stock.index("--criterion") + 1] == "label_smoothed_cross_entropy"
    # the rest is the same command
    assert [a for a in plugin if a not in ("--user-dir", commands.USER_DIR, "lexical_cross_entropy")] == [
        a for a in stock if a != "label_smoothed_cross_entropy"
    ]


def test_summary_json_in_results_is_valid_where_present():
    path = os.path.join(REPO, "examples", "results", "pretrained_finetune_eng_cmn_cpu.json")
    if not os.path.isfile(path):
        pytest.skip(f"{path} not written yet (examples/pretrained/run.sh writes WORK/summary.json)")
    with open(path) as f:
        summary = json.load(f)
    assert {"pretrained", "plain", "pgn", "lex"} <= set(summary["rows"])
    assert summary["split"]["finetune_pairs"] == 1000
