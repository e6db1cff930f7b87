"""Every recipe's --dry-run output (the commands it would run) against golden files in tests/data/recipe_dry_run/.

The recipes' code may move and change shape; the commands it builds must not, except on purpose. The cases cover
each task, each model family (LSTM, lexical, copy, Transformer, R-Dangle, LLA), the paper, --cpu-small and
--cpu-medium settings, the tasks' own options and examples/custom. Machine-specific paths are replaced by $REPO,
$TMP and $BIN before comparing. After an intended change of the commands, rewrite the golden files with
    RECIPE_DRY_RUN_UPDATE=1 python -m pytest tests/recipes/test_dry_run.py
and check that their diff shows only that change."""

import os
import re
import subprocess

import pytest

from tests.helpers.environment import REPO
from tests.helpers.toy_data import make_toy_pairs, write_split, write_tiny_layouts

GOLDEN = os.path.join(REPO, "tests", "data", "recipe_dry_run")
TRANSFORMERS = "transformer,lex_transformer,pgn,dangle,rdangle_shr,rdangle_sep,rdangle_sep_o1"

# case -> (examples/<driver>/run.sh, options; DATA and TMP stand for the fake data and the tmp directory)
CASES = {
    "colors_default": ("colors", []),
    "colors_paper_cpu_small": ("colors", ["--models", "paper", "--cpu-small"]),
    "colors_lla_damage": ("colors", ["--models", "lla,lla_noadv", "--damage"]),
    "colors_lla_last_reduced": (
        "colors",
        [
            "--models",
            "lla",
            "--lla-checkpoint",
            "last",
            "--lla-max-epoch",
            "200",
            "--lla-batch-size",
            "10",
            "--lla-lr",
            "0.002",
            "--patience",
            "3",
        ],
    ),
    "colors_overrides": (
        "colors",
        [
            "--models",
            "uniform,soft,learned,copy",
            "--decoder",
            "fairseq",
            "--seeds",
            "2",
            "--max-update",
            "100",
            "--lr",
            "0.01",
            "--warmup-updates",
            "7",
            "--beam",
            "1",
            "--sentence-avg",
            "--adam-betas",
            "(0.9, 0.98)",
            "--train-args",
            "--dropout 0.2",
            "--generate-args",
            "--nbest 1",
            "--keep-checkpoints",
            "all",
        ],
    ),
    "colors_given_lexicon": ("colors", ["--models", "simple,soft", "--lexicon", "TMP/given.tsv", "--seed-list", "3,5"]),
    "scan_jump_paper": ("scan", ["--data", "DATA/scan"]),
    "scan_around_right_all_cpu_small": (
        "scan",
        [
            "--data",
            "DATA/scan",
            "--split",
            "around_right",
            "--models",
            "all",
            "--cpu-small",
            "--checkpoint",
            "best",
            "--patience",
            "0",
        ],
    ),
    "scan_transformers_cpu_small": (
        "scan",
        ["--data", "DATA/scan", "--split", "around_right", "--models", TRANSFORMERS, "--cpu-small"],
    ),
    "scan_jump_cpu_medium": (
        "scan",
        ["--data", "DATA/scan", "--models", "lstm,simple,lex_transformer", "--cpu-medium"],
    ),
    "scan_valid_options": (
        "scan",
        [
            "--data",
            "DATA/scan",
            "--models",
            "lstm,simple",
            "--valid-fraction",
            "0.2",
            "--valid-seed",
            "4",
            "--token-avg",
            "--update-freq",
            "2",
            "--batch-size",
            "16",
        ],
    ),
    "cogs_paper": ("cogs", ["--data", "DATA/cogs"]),
    "cogs_transformers_paper": ("cogs", ["--data", "DATA/cogs", "--models", TRANSFORMERS]),
    "cogs_cpu_medium": ("cogs", ["--data", "DATA/cogs", "--models", "lstm,copy,simple", "--cpu-medium"]),
    "cogs_transformer_overrides": (
        "cogs",
        [
            "--data",
            "DATA/cogs",
            "--models",
            "transformer,pgn",
            "--max-tokens",
            "0",
            "--batch-size",
            "32",
            "--max-update",
            "500",
            "--sentence-avg",
        ],
    ),
    "cogs_gen_2020_lla": (
        "cogs",
        [
            "--data",
            "DATA/cogs",
            "--gen",
            "gen_2020.tsv",
            "--models",
            "lla,simple",
            "--damage",
            "none,lstm",
            "--lexicon-top-k",
            "3",
        ],
    ),
    "eng_cmn_paper": ("eng_cmn", ["--data", "DATA/eng_cmn"]),
    "eng_cmn_thrush_lla": (
        "eng_cmn",
        ["--data", "DATA/eng_cmn", "--models", "lla,lla_noadv", "--tokenization", "thrush", "--damage"],
    ),
    "eng_cmn_rdangle_cpu_small": (
        "eng_cmn",
        [
            "--data",
            "DATA/eng_cmn",
            "--models",
            "rdangle_sep,lstm,pmi",
            "--cpu-small",
            "--max-tokens",
            "2048",
            "--decode-jobs",
            "2",
            "--lexicon-top-k",
            "0",
        ],
    ),
    "custom_lstm_paper": ("custom", ["--train", "DATA/custom/train", "--test", "DATA/custom/test"]),
    "custom_transformer_cpu": (
        "custom",
        [
            "--train",
            "DATA/custom/train.tsv",
            "--test",
            "DATA/custom/test.tsv",
            "--valid",
            "DATA/custom/valid",
            "--family",
            "transformer",
            "--lexicons",
            "simple,ibm2,pmi",
            "--cpu",
            "--seeds",
            "2",
        ],
    ),
    "custom_smoke": (
        "custom",
        [
            "--train",
            "DATA/custom/train",
            "--test",
            "DATA/custom/test",
            "--smoke",
            "--lexicons",
            "bayes",
            "--checkpoint",
            "best",
        ],
    ),
}


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    """The tasks' layouts (conftest.write_tiny_layouts), COGS' gen_2020.tsv, a given lexicon, examples/custom data."""
    root = tmp_path_factory.mktemp("dry")
    data = root / "data"
    write_tiny_layouts(data)
    (data / "cogs" / "gen_2020.tsv").write_text((data / "cogs" / "gen.tsv").read_text())
    (root / "given.tsv").write_text("a\tb\t1\n")
    custom = data / "custom"
    custom.mkdir()
    for name, n, seed in (("train", 40, 1), ("valid", 8, 2), ("test", 8, 3)):
        pairs = make_toy_pairs(n, seed)
        write_split(str(custom / name), pairs)
        (custom / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    return root


def normalise(text, tmp):
    """Paths of this machine -> $TMP, $REPO, $BIN (the environment's bin/: python, fairseq-*)."""
    # the bin/ directory first: it may lie inside the checkout (a CI clone's .venv) or under tmp
    text = re.sub(
        r"(?<![\w$])/\S*?/bin/(python[\d.]*|fairseq-[a-z-]+)\b",
        lambda m: "$BIN/" + ("python" if m.group(1).startswith("python") else m.group(1)),
        text,
    )
    return text.replace(str(tmp), "$TMP").replace(REPO, "$REPO")


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_prints_the_golden_commands(case, fake_data):
    driver, options = CASES[case]
    args = [a.replace("DATA", str(fake_data / "data")).replace("TMP", str(fake_data)) for a in options]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [
            "bash",
            os.path.join(REPO, "examples", driver, "run.sh"),
            *args,
            "--dry-run",
            "--work",
            str(fake_data / "work" / case),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (fake_data / "work" / case).exists()  # a dry run writes nothing
    got = normalise(proc.stdout, fake_data)
    path = os.path.join(GOLDEN, case + ".txt")
    if os.environ.get("RECIPE_DRY_RUN_UPDATE"):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(got)
    with open(path, encoding="utf-8") as f:
        expected = f.read()
    assert got == expected, f"{case}: the dry run differs from {path}"
