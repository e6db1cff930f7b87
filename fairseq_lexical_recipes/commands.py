"""Every command the example pipelines run, built from where a work directory keeps its files (Layout) and the
settings dataclasses: fairseq-preprocess, tools/build_lexicon.py, fairseq-train, fairseq-generate, tools/score.py
and tools/damage.py. Pure functions (nothing is read, written or run here): the recipes (recipe.Recipe),
examples/cat_oci and examples/compositional_split build their commands with them."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from lexical_offline.beam_searches import KEEP_BEST_TASK_NAME
from fairseq_lexical_recipes import ROOT
from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.process import search_options, tool
from fairseq_lexical_recipes.settings import HParams, TransformerSettings

USER_DIR = os.path.join(ROOT, "fairseq_lexical")  # fairseq's --user-dir
LOG_FORMAT = "--log-format json"  # progress records read by fairseq_log

# Runs without validation (Colors) would save their first checkpoint at the end: an interrupted one could not resume.
# Saving changes nothing in training; the fingerprint leaves these options out, so earlier runs stay reusable.
RESUME_SAVE_EVERY = 100
RESUME_SAVE = (
    "--disable-validation",
    "--save-interval",
    "100000",
    "--save-interval-updates",
    str(RESUME_SAVE_EVERY),
    "--keep-interval-updates",
    "1",
)


@dataclass(frozen=True)
class Layout:
    """Where a work directory keeps the data (train/valid/test/lexcorpus .src/.tgt), the data-bins and the
    lexicons."""

    work: str
    data: str
    bin: str
    bin_joined: str  # --joined-dictionary (pgn)
    lexicons: str

    @classmethod
    def of(cls, work: str) -> "Layout":
        return cls(work, f"{work}/data", f"{work}/bin", f"{work}/bin_joined", f"{work}/lexicons")

    def bin_of(self, joined: bool) -> str:
        return self.bin_joined if joined else self.bin


def tools_script(name: str) -> List[str]:
    """A program of the checkout's tools/, run by this interpreter (tools/ is not installed, so the recipes need the
    editable install of a checkout that tools/setup_env.sh makes: ROOT is the folder above this package)."""
    path = os.path.join(ROOT, "tools", name)
    if not os.path.isfile(path):
        raise RecipeError(
            f"{path} is absent: fairseq_lexical_recipes runs from a checkout of the repository (imported from "
            f"{os.path.dirname(os.path.abspath(__file__))}); install the checkout editable: bash tools/setup_env.sh"
        )
    return [sys.executable, path]


def preprocess(
    prefixes: Mapping[str, str],
    destdir: str,
    source: str = "src",
    target: str = "tgt",
    joined: bool = False,
    srcdict: Optional[str] = None,
    dict_only: bool = False,
) -> List[str]:
    """fairseq-preprocess of the splits' file prefixes (those of train, valid, test given: PREFIX.<source> and
    PREFIX.<target>); ``dict_only``: the dictionaries of the training text alone."""
    return [
        tool("fairseq-preprocess"),
        "--source-lang",
        source,
        "--target-lang",
        target,
        *(a for split in ("train", "valid", "test") if split in prefixes for a in (f"--{split}pref", prefixes[split])),
        "--destdir",
        destdir,
        "--workers",
        "1",
        *(["--joined-dictionary"] if joined else []),
        *(["--dict-only"] if dict_only else []),
        *(["--srcdict", srcdict] if srcdict else []),
    ]


def stamp_command(cmd: Sequence[str], work: str) -> str:
    """A step's command as its stamp records it, the same wherever the checkout, the environment and WORK are: paths
    under ``work`` as WORK/..., the checkout's scripts relative to it, the program by its name. So a work directory
    prepared on one machine is up to date on another (a GPU campaign carries its data-bins and lexicons: docs/gpu.md);
    the data's content is in the stamp's data_sha1."""
    work, root = os.path.abspath(work), ROOT

    def portable(k: int, arg: str) -> str:
        if k == 0:
            return os.path.basename(arg)
        if os.path.isabs(arg):
            for base, name in ((work, "WORK"), (root, "")):
                if arg == base or arg.startswith(base + os.sep):
                    return os.path.join(name, os.path.relpath(arg, base)) if name else os.path.relpath(arg, base)
        return arg

    return " ".join(shlex.quote(portable(k, str(a))) for k, a in enumerate(cmd))


def build_lexicon(method_options: Sequence[str], source: str, target: str, output: str) -> List[str]:
    """tools/build_lexicon.py with ``method_options`` (--method ... and its options) on a parallel corpus."""
    return [
        *tools_script("build_lexicon.py"),
        *method_options,
        "--src",
        source,
        "--tgt",
        target,
        "-o",
        output,
        "--no-progress",
    ]


def fairseq_train(
    data_bin: str,
    model: Sequence[str],
    seed: int,
    save_dir: str,
    *,
    optimisation: Sequence[str],
    batching: Sequence[str],
    schedule: Sequence[str],
    criterion: Sequence[str] = (),
    log_interval: int = 100,
    log_format: str = LOG_FORMAT,
    after: Sequence[str] = (),
    extra: str = "",
    plugin: bool = True,
) -> List[str]:
    """The one fairseq-train command of every row (LSTM, Transformer, LLA) of every pipeline: the ``model``
    options (--arch, --lexicon, ...) on ``data_bin``, lexical_cross_entropy with ``criterion`` options, Adam with
    ``optimisation``, ``batching``, the length of training (``schedule``), checkpoints and logs in ``save_dir``,
    then ``after`` (validation, saving) and the user's ``extra`` options (one string). ``plugin=False``: stock
    fairseq (no --user-dir, fairseq's label_smoothed_cross_entropy), e.g. a model to fine-tune with the plugin."""
    return [
        tool("fairseq-train"),
        data_bin,
        *(["--user-dir", USER_DIR] if plugin else []),
        *model,
        "--criterion",
        "lexical_cross_entropy" if plugin else "label_smoothed_cross_entropy",
        *criterion,
        "--optimizer",
        "adam",
        *optimisation,
        *batching,
        "--required-batch-size-multiple",
        "1",
        *schedule,
        "--seed",
        str(seed),
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        *log_format.split(),
        "--log-interval",
        str(log_interval),
        "--num-workers",
        "0",
        *after,
        *shlex.split(extra),
    ]


def replicas_dir(model_dir: str, seeds: Sequence[int]) -> str:
    """Where a row's seeds trained together (--replicas) keep their log, config and stacked checkpoints:
    MODEL_DIR/replicas-1-2-3 (the recipes and the campaign's scheduler read it there)."""
    return f"{model_dir}/replicas-{'-'.join(map(str, seeds))}"


def replicated_train(command: Sequence[str], seeds: Sequence[int], save_dir: str, replica_dirs: str) -> List[str]:
    """A row's fairseq-train ``command`` (fairseq_train's, for one seed) as the one process that trains ``seeds``
    together (--replica-seeds): the stacked checkpoints in ``save_dir``, each seed's own in ``replica_dirs``
    ({seed} for the seed: the seeds' run directories)."""
    out = list(command)
    at = out.index("--seed")
    del out[at : at + 2]
    out[out.index("--save-dir") + 1] = save_dir
    seed_list = ",".join(map(str, seeds))
    return out + ["--task", KEEP_BEST_TASK_NAME, "--replica-seeds", seed_list, "--replica-dirs", replica_dirs]


def lstm_training(hp: HParams) -> Dict[str, List[str]]:
    """fairseq_train's criterion, optimisation, batching and schedule of an LSTM row: appendix C.1's inverse-sqrt
    (Noam) schedule."""
    return {
        "criterion": ["--sentence-avg"] if hp.sentence_avg else [],
        "optimisation": (["--adam-betas", hp.adam_betas] if hp.adam_betas else [])
        + [
            "--lr",
            f"{hp.lr:.6g}",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            str(hp.warmup),
            "--clip-norm",
            str(hp.clip_norm),
        ],
        "batching": ["--batch-size", str(hp.batch_size), "--update-freq", str(hp.update_freq)],
        "schedule": ["--max-update", str(hp.max_update)],
    }


def transformer_training(ts: TransformerSettings) -> Dict[str, List[str]]:
    """fairseq_train's criterion, optimisation, batching and schedule of a Transformer row: fairseq's
    transformer_iwslt_de_en recipe (TransformerSettings)."""
    return {
        "criterion": ["--label-smoothing", f"{ts.label_smoothing:g}"] + (["--sentence-avg"] if ts.sentence_avg else []),
        "optimisation": [
            "--adam-betas",
            ts.adam_betas,
            "--weight-decay",
            f"{ts.weight_decay:g}",
            "--lr",
            f"{ts.lr:.6g}",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            str(ts.warmup),
            "--clip-norm",
            f"{ts.clip_norm:g}",
        ],
        "batching": (["--max-tokens", str(ts.max_tokens)] if ts.max_tokens else [])
        + (["--batch-size", str(ts.batch_size)] if ts.batch_size else [])
        + ["--update-freq", str(ts.update_freq)],
        "schedule": ["--max-update", str(ts.max_update)],
    }


def validation(validate_every: Optional[int], patience: Optional[int]) -> List[str]:
    """Validation every ``validate_every`` updates, a checkpoint at each (the last one kept), early stopping after
    ``patience`` validations; without validation (None) a checkpoint every RESUME_SAVE_EVERY updates."""
    if validate_every is None:
        return list(RESUME_SAVE)
    return [
        "--validate-interval",
        "100000",
        "--validate-interval-updates",
        str(validate_every),
        "--save-interval",
        "100000",
        "--save-interval-updates",
        str(validate_every),
        "--keep-interval-updates",
        "1",
        *(["--patience", str(patience)] if patience else []),
    ]


def fairseq_generate(
    data_bin: str,
    checkpoint: str,
    beam: int,
    batch_size: int,
    max_len_b: int,
    max_len_a: float = 0,
    after: Sequence[str] = (),
    extra: str = "",
) -> List[str]:
    """fairseq-generate of the test split with ``checkpoint``, the plugin's search for the beam
    (process.search_options), then ``after`` and the user's ``extra`` options (one string)."""
    return [
        tool("fairseq-generate"),
        data_bin,
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoint,
        "--gen-subset",
        "test",
        "--beam",
        str(beam),
        "--batch-size",
        str(batch_size),
        "--max-len-a",
        f"{max_len_a:g}",
        "--max-len-b",
        str(max_len_b),
        "--num-workers",
        "0",
        *search_options(beam),
        *after,
        *shlex.split(extra),
    ]


def score(
    generate_txt: str, reference: str, options: Sequence[str] = (), hypotheses: Optional[str] = None
) -> List[str]:
    """tools/score.py of a fairseq-generate output against the reference file, as JSON."""
    return [
        *tools_script("score.py"),
        generate_txt,
        *(["--hypotheses", hypotheses] if hypotheses else []),
        "--reference",
        reference,
        *options,
        "--json",
    ]


def damage(
    data_bin: str,
    checkpoint: str,
    conditions: Sequence[str],
    seed: int,
    hp: HParams,
    examples: Sequence[str] = (),
) -> List[str]:
    """tools/damage.py (Thrush 2020, Table 2) of ``checkpoint`` under each damage condition, decoded as the run's
    fairseq-generate decodes."""
    return [
        *tools_script("damage.py"),
        data_bin,
        "--path",
        checkpoint,
        "--damage",
        ",".join(conditions),
        "--seed",
        str(seed),
        "--gen-subset",
        "test",
        "--beam",
        str(hp.beam),
        "--max-len-a",
        "0",
        "--max-len-b",
        str(hp.max_len_b),
        "--batch-size",
        str(hp.gen_batch_size),
        *[a for e in examples for a in ("--example", e)],
        "--json",
    ]


def recipe_process(task: str, argv: Sequence[str]) -> List[str]:
    """`python -m fairseq_lexical_recipes TASK ...`: one (model, seed) of a --jobs parent, or a campaign run on the
    device."""
    return [sys.executable, "-m", "fairseq_lexical_recipes", task, *argv]
