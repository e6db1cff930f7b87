#!/usr/bin/env python
"""Catalan -> Occitan on the 5,500 Tatoeba pairs of ../shared/data/cat_oci: NMT vs PGN vs PGN + lexicon at 1k /
2.5k / 5k training pairs, after the set-up of Bafna & Yarowsky (2024), section 4 (see examples/cat_oci/README.md).

    bash examples/cat_oci/run.sh [--cpu-small] [--cpu] [--sizes 1000,2500,5000] [--systems nmt,pgn,pgn_lex] ...

The command line only: the recipe (its checks, preparation per training size, runs and report) is the package's,
fairseq_lexical_recipes.tasks.cat_oci.
"""

from __future__ import annotations

import argparse
import sys

from fairseq_lexical_recipes import process
from fairseq_lexical_recipes.console import exit_status_of
from fairseq_lexical_recipes.tasks.cat_oci import CatOciOptions, CatOciRecipe, CatOciRunner
from fairseq_lexical_recipes.tasks.cat_oci.recipe import LEXICON_METHODS

DEFAULTS = CatOciOptions()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bash examples/cat_oci/run.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--data", default=DEFAULTS.data, help=f"folder with tatoeba.ca and tatoeba.oc (default {DEFAULTS.data})"
    )
    g.add_argument("--work", help="work directory (default $TMPDIR/fairseq_lexical_cat_oci[_small], TMPDIR=/tmp)")
    g.add_argument(
        "--direction",
        choices=("ca-oc", "oc-ca"),
        default=DEFAULTS.direction,
        help="ca-oc (default: high- to low-resource, as the paper's fr-oc and es-ca)",
    )
    g.add_argument("--dev-size", type=int, default=DEFAULTS.dev_size)
    g.add_argument("--test-size", type=int, default=DEFAULTS.test_size)
    g.add_argument(
        "--split-seed", type=int, default=DEFAULTS.split_seed, help="seed of the shuffle behind the split (default 1)"
    )
    g.add_argument("--sizes", default=DEFAULTS.sizes, help="training sizes, nested (default 1000,2500,5000)")
    g.add_argument("--limit", type=int, help="use only the corpus' first N pairs (tests)")
    g.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULTS.vocab_size,
        help="joint SentencePiece BPE vocabulary (default 2000; the paper's 16000 exceeds what 1k pairs hold)",
    )
    g = p.add_argument_group("what to run")
    g.add_argument("--systems", default=DEFAULTS.systems, help="comma-separated: nmt, pgn, pgn_lex (default all)")
    g.add_argument("--seeds", type=int, default=DEFAULTS.seeds, help="training seeds 1..N (default 1)")
    g.add_argument(
        "--lexicon-method",
        default=DEFAULTS.lexicon_method,
        choices=LEXICON_METHODS,
        help="tools/build_lexicon.py method for pgn_lex, over the pieces (default ibm2, intersected)",
    )
    g.add_argument("--force", action="store_true", help="redo finished steps")
    g.add_argument("--progress-every", type=float, default=DEFAULTS.progress_every, metavar="SECONDS")
    g = p.add_argument_group("settings (default: the paper's sizes; see the README)")
    g.add_argument(
        "--cpu-small",
        action="store_true",
        help="tiny Transformers (not the paper's), batch 64, lr 1e-3, "
        "400 warm-up, 3000 updates max, dev loss every 250",
    )
    g.add_argument("--cpu", action="store_true", help="pass --cpu to fairseq-train and fairseq-generate")
    g.add_argument("--max-update", type=int)
    g.add_argument("--lr", type=float)
    g.add_argument("--warmup-updates", type=int)
    g.add_argument("--batch-size", type=int, help="sentences per batch")
    g.add_argument("--max-tokens", type=int, help="tokens per batch (paper setting 4096; 0: none)")
    g.add_argument("--validate-every", type=int, help="updates between dev-loss checks (and checkpoints)")
    g.add_argument("--patience", type=int, help="stop after N dev checks without a better loss (0: off)")
    g.add_argument("--beam", type=int)
    g.add_argument("--train-args", default="", help="further fairseq-train options (one quoted string)")
    g.add_argument("--generate-args", default="", help="further fairseq-generate options (one quoted string)")
    return p


def main(argv=None) -> int:
    options = CatOciOptions.from_namespace(build_parser().parse_args(argv))
    process.PROGRESS_EVERY = max(1.0, options.progress_every)
    return exit_status_of(lambda: CatOciRunner(CatOciRecipe(options)).run())


if __name__ == "__main__":
    sys.exit(main())
