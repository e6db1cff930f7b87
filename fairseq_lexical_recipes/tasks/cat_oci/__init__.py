"""examples/cat_oci as a recipe of the package: Catalan -> Occitan on the 5,500 Tatoeba pairs of ../shared/data/cat_oci,
NMT vs PGN vs PGN + lexicon at 1k / 2.5k / 5k training pairs, after the set-up of Bafna & Yarowsky (2024), section 4
(examples/cat_oci/README.md). examples/cat_oci/run.py parses the command line and runs it.

split (seeded; dev/test sources never occur in training) -> for each training size, one stage (runner.Stage): joint
SentencePiece BPE model on that size's training pairs (both sides) -> pieces -> fairseq-preprocess (one joined
dictionary = the SentencePiece vocabulary) -> lexicon over pieces (tools/build_lexicon.py, for pgn_lex) -> for each
system and seed: fairseq-train -> fairseq-generate (SentencePiece-decoded D lines) -> tools/score.py (BLEU 13a,
chrF) -> table.

Modules: recipe (the options checked into a frozen CatOci, the settings and systems, the planner CatOciRecipe: every
command, each size's runs as execute.RunSpecs), prepare (the split and each size's preparation), runner (CatOciRunner:
checks, lock, the stages through runner.run_stages and runner.execute_runs, the report).

WORK layout: data/{train,valid,test}.{ca,oc} + split.json; n<SIZE>/{spm.model, dict.txt, pieces/, bin/,
lexicon.tsv}; n<SIZE>/<system>/seed<S>/{config.json, train.log, generate.txt, score.json, run.json}; summary.json.
A run whose score.json exists with the same commands is skipped (run again to resume after an interruption). Every
file is written under the recipes' ownership rules (ownership.py): a file of a name the driver writes that it did
not write stops it before anything is written (CatOciRecipe.writes).
"""

from fairseq_lexical_recipes.tasks.cat_oci.recipe import CatOciOptions, CatOciRecipe  # noqa: F401
from fairseq_lexical_recipes.tasks.cat_oci.runner import CatOciRunner  # noqa: F401
