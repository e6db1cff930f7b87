"""The recipes' command line: `python -m fairseq_lexical_recipes TASK [options]` (examples/<task>/run.sh)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, Tuple

from fairseq_lexical_recipes import process
from fairseq_lexical_recipes.catalogue import MODELS, rows_of
from fairseq_lexical_recipes.console import exit_status_of
from fairseq_lexical_recipes.families import TRANSFORMER
from fairseq_lexical_recipes.invocation import OptionError
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.recipe import Recipe
from fairseq_lexical_recipes.runner import Runner
from fairseq_lexical_recipes.settings import CPU_LSTM_ARCH_SIZES, LlaSettings
from fairseq_lexical_recipes.tasks import TASKS, Task


def build_parser(task: Task) -> argparse.ArgumentParser:
    paper_list = ",".join(task.paper_models)
    parser = argparse.ArgumentParser(
        prog=f"bash examples/{task.name}/run.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"{task.name}: prepare -> lexicons -> fairseq-preprocess -> train -> generate -> score, for each "
        f"model and seed, then mean +/- std over seeds (see examples/{task.name}/README.md).",
        epilog=(
            f"Models: {', '.join(f'{k} ({v.label})' for k, v in MODELS.items())}.\n"
            f"'paper' = the rows of the paper's {task.paper_table} for this task: {paper_list}; 'all' = every "
            f"model but lla and lla_noadv (Thrush 2020) and the Transformer rows ({', '.join(rows_of(TRANSFORMER))}): "
            f"name them.\nThe paper's defaults are appendix C.1's settings; --cpu-small and --cpu-medium are "
            f"CPU-sized variants, labelled as such in the output, config.json and summary.json."
        ),
    )
    g = parser.add_argument_group("data and output")
    default_data = task.default_data()
    g.add_argument(
        "--data",
        default=default_data,
        required=default_data is None,
        help="data directory, official layout" + (f" (default {default_data})" if default_data else ""),
    )
    g.add_argument("--work", help="work directory (default $TMPDIR/fairseq_lexical_<task>[_<split>], TMPDIR=/tmp)")
    g = parser.add_argument_group("what to run")
    g.add_argument(
        "--models",
        default=task.default_models,
        help=f"comma-separated models, or 'paper' / 'all' (default {task.default_models})",
    )
    g.add_argument(
        "--seeds",
        type=int,
        default=RecipeOptions.seeds,
        help=f"run seeds 1..N (default 1; the paper: {task.paper_seeds})",
    )
    g.add_argument("--seed-list", help="comma-separated seeds instead of 1..N (e.g. to split seeds across machines)")
    g.add_argument(
        "--replicas",
        choices=["auto", "on", "off"],
        default=RecipeOptions.replicas,
        help="train an LSTM row's seeds in one process, stacked (fairseq-train --replica-seeds; each seed's run "
        "folder and results as before): on, off, or auto (default): on where a CUDA GPU is visible, off on CPUs "
        "(slower there: docs/benchmarks.md, 'Replicas')",
    )
    g.add_argument(
        "--force",
        action="store_true",
        help="re-run (model, seed) pairs that have a score.json, and rebuild the lexicons",
    )
    g.add_argument("--dry-run", action="store_true", help="check the data and print the commands, run nothing")
    g.add_argument(
        "--prepare-only",
        action="store_true",
        help="prepare the data, the models' lexicons and the data-bin in --work, then stop (later "
        "invocations on the same --work reuse them)",
    )
    g.add_argument(
        "--jobs",
        type=int,
        default=task.default_jobs,
        metavar="N",
        help="after the preparation run up to N (model, seed) pairs at once, each as its own recipe "
        "process (python -m fairseq_lexical_recipes ... --models M --seed-list S --jobs 1) logging to "
        "WORK/jobs/<model>_seed<N>.log, with idle cores/N threads unless OMP_NUM_THREADS is set; a failed "
        "pair does not stop the others (default %(default)s; 1: one after the other, in this process)",
    )
    # a --jobs child: the parent prepared the work directory, writes its config.json and the report
    g.add_argument("--as-job", action="store_true", help=argparse.SUPPRESS)
    g.add_argument(
        "--progress-every",
        type=float,
        default=RecipeOptions.progress_every,
        metavar="SECONDS",
        help=f"how often to print a training run's update count and validation loss, and with --jobs "
        f"how many pairs run, are done and wait (default {process.PROGRESS_EVERY:.0f})",
    )
    g.add_argument(
        "--keep-checkpoints",
        choices=("used", "all", "none"),
        default=RecipeOptions.keep_checkpoints,
        help="after scoring keep the evaluated checkpoint (default), every checkpoint, or none",
    )
    g = parser.add_argument_group("settings (defaults: the paper's, appendix C.1)")
    size = g.add_mutually_exclusive_group()
    size.add_argument(
        "--cpu-small",
        dest="preset",
        action="store_const",
        const="cpu-small",
        help="CPU-sized settings, not the paper's: 2 x 128 LSTM and, except on Colors, batch 64, "
        "2000 updates, 400 warm-up updates, validation every 250 updates",
    )
    size.add_argument(
        "--cpu-medium",
        dest="preset",
        action="store_const",
        const="cpu-medium",
        help="--cpu-small's models and batch trained as long as the CPU learning curves ask (SCAN "
        "and COGS: 12000 updates, no early stopping, greedy decoding); one run fits in 90 "
        "minutes on one CPU thread (examples/RESULTS.md)",
    )
    parser.set_defaults(preset="paper")
    g.add_argument(
        "--hidden",
        type=int,
        choices=sorted(CPU_LSTM_ARCH_SIZES),
        help="with --cpu-small / --cpu-medium: the LSTM rows' size, 128 (the _small archs, default) or "
        "256 (the _medium archs), and the lr scaled by the Noam schedule's d^-0.5 unless --lr",
    )
    g.add_argument("--max-update", type=int, help="training updates")
    g.add_argument("--lr", type=float, help="peak learning rate of the inverse-sqrt (Noam) schedule")
    g.add_argument("--warmup-updates", type=int)
    g.add_argument("--batch-size", type=int, help="sentences per batch (times --update-freq per update)")
    g.add_argument("--update-freq", type=int, help="batches accumulated per update")
    g.add_argument(
        "--max-tokens",
        type=int,
        help="Transformer rows only: tokens per batch (default 4096, fairseq's "
        "transformer_iwslt_de_en recipe; 0: none, use --batch-size)",
    )
    g.add_argument(
        "--patience", type=int, help="early stopping after N validations without a better validation loss (0: off)"
    )
    g.add_argument("--beam", type=int, help="beam size of fairseq-generate (1: greedy, the authors' test decoding)")
    g.add_argument(
        "--max-len-b", type=int, help="fairseq-generate's output length limit, in tokens (default: the task's)"
    )
    g.add_argument("--checkpoint", choices=("last", "best"), help="checkpoint to evaluate")
    g.add_argument(
        "--decoder",
        choices=("authors", "fairseq"),
        help="LSTM rows: 'authors' (default), the decoder of the authors' released code "
        "(--decoder-output combined --embedding-init normal, which also draws their initial weights, and "
        "--gate-form copy-token --gate-features output --exclude-special-outputs on lexical rows); "
        "'fairseq': fairseq's LSTM decoder with eq. 6's gate",
    )
    avg = g.add_mutually_exclusive_group()
    avg.add_argument(
        "--sentence-avg",
        dest="sentence_avg",
        action="store_true",
        default=None,
        help="loss summed per sentence, averaged over sentences (the authors' code)",
    )
    avg.add_argument("--token-avg", dest="sentence_avg", action="store_false", help="loss averaged over tokens")
    g.add_argument("--adam-betas", help="e.g. '(0.9, 0.998)'")
    g.add_argument(
        "--lexicon",
        help="use this lexicon file for the Simple rows (simple, soft, learned, lex_transformer) instead of "
        "learning one",
    )
    g.add_argument("--lexicon-top-k", type=int, help="keep at most K targets per lexicon row in the model (0: all)")
    g.add_argument(
        "--train-args", default=RecipeOptions.train_args, help="further fairseq-train options (one quoted string)"
    )
    g = parser.add_argument_group("lla, lla_noadv (Thrush 2020; defaults: the paper's schedule, docs/lla.md)")
    g.add_argument(
        "--lla-max-epoch",
        type=int,
        default=LlaSettings.max_epoch,
        help=f"last training epoch (default {LlaSettings.max_epoch})",
    )
    g.add_argument(
        "--lla-lexicon-epochs",
        type=int,
        default=LlaSettings.lexicon_epochs,
        help=f"epochs 1..N train the Lexicon Unit alone (default {LlaSettings.lexicon_epochs})",
    )
    g.add_argument(
        "--lla-batch-size",
        type=int,
        default=LlaSettings.batch_size,
        help=f"batch size after the Lexicon Unit epochs (default {LlaSettings.batch_size})",
    )
    g.add_argument(
        "--lla-lexicon-batch-size",
        type=int,
        default=LlaSettings.lexicon_batch_size,
        help=f"batch size of the Lexicon Unit epochs (default {LlaSettings.lexicon_batch_size})",
    )
    g.add_argument(
        "--lla-lr",
        type=float,
        default=LlaSettings.lr,
        help=f"Adam's constant learning rate (default {LlaSettings.lr:g}; the Lexicon Unit gets 100 times it)",
    )
    g.add_argument(
        "--lla-checkpoint",
        choices=("best", "last"),
        default=LlaSettings.checkpoint,
        help="best (default, Thrush's model selection): validate every epoch after the Lexicon Unit "
        "epochs (Colors: on the training set) and evaluate the first epoch with the highest exact "
        "match (English-Chinese: greedy BLEU), retrained to that epoch from the Lexicon Unit "
        "checkpoint; last: the last epoch",
    )
    g.add_argument(
        "--damage",
        nargs="?",
        const="auto",
        metavar="CONDITIONS",
        help="after scoring, run tools/damage.py on each lla model's evaluated checkpoint (Table 2): "
        "without a value none,lstm,lexicon and adversary (where the model has one); else "
        "comma-separated conditions (groups joined by '+'). Writes <model>/seed<N>/damage.json and "
        "a mean +/- std table per condition",
    )
    g.add_argument(
        "--generate-args",
        default=RecipeOptions.generate_args,
        help="further fairseq-generate options (one quoted string)",
    )
    g.add_argument(
        "--decode-jobs",
        type=int,
        default=RecipeOptions.decode_jobs,
        metavar="N",
        help="split each fairseq-generate over N processes (its --distributed-world-size N "
        "--distributed-rank i: the same batches, dealt out), each with idle cores/N threads unless "
        "OMP_NUM_THREADS is set; the outputs are concatenated (default 1)",
    )
    task.add_args(parser)
    return parser


def parse(argv: Sequence[str]) -> Tuple[Task, RecipeOptions]:
    """TASK and its options as parsed: the invocation's task (built with its own options) and RecipeOptions (checked
    by the Recipe: invocation.check_options)."""
    return parsed(argv)[1:]


def parsed(argv: Sequence[str]) -> Tuple[argparse.ArgumentParser, Task, RecipeOptions]:
    task_class = TASKS[argv[0]]
    parser = build_parser(task_class())
    args = parser.parse_args(argv[1:])
    task = task_class(**{name: getattr(args, name) for name in task_class.own_options})
    return parser, task, RecipeOptions.from_namespace(args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TASKS:
        print(
            f"usage: python -m fairseq_lexical_recipes {{{','.join(TASKS)}}} [options] "
            "(normally called by examples/<task>/run.sh)",
            file=sys.stderr,
        )
        return 2
    parser, task, options = parsed(argv)
    process.PROGRESS_EVERY = max(1.0, options.progress_every)

    def start() -> int:
        try:
            recipe = Recipe(task, options)
        except OptionError as e:  # a value no run can take: the usage, and the error
            parser.error(str(e))
        return Runner(recipe).run()

    return exit_status_of(start)
