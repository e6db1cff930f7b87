"""COGS (Kim & Linzen 2020): Akyurek & Andreas 2021, sections 5.3 and 5.5, Tables 2, 3 and 5."""

import os
from dataclasses import replace

from lexical_offline.metrics.aggregate import format_mean_std

from fairseq_lexical_recipes.reports import table
from fairseq_lexical_recipes.settings import AUTHORS_TEST_BEAM
from fairseq_lexical_recipes.tasks.base import Prepared, Task, em, find_file
from fairseq_lexical_recipes.textio import read_corpus


class Cogs(Task):
    name = "cogs"
    title = "COGS generalization (gen) exact match"
    paper_models = ("lstm", "copy", "simple", "pmi", "ibm2", "ibm1", "bayes", "uniform", "soft", "learned")
    paper_seeds = 10
    paper_table = "Tables 2 and 5"
    own_options = ("gen",)
    gen = "gen.tsv"

    def add_args(self, parser):
        g = parser.add_argument_group("COGS")
        g.add_argument(
            "--gen",
            default=self.gen,
            help="generalization set in the data directory (default gen.tsv; gen_2020.tsv is the "
            "2020 version the paper used)",
        )

    def hparams(self, preset):
        # COGS outputs reach 480 tokens (recursion cases of gen): fairseq-generate's default limit is 200.
        return replace(super().hparams(preset), max_len_b=512, beam=AUTHORS_TEST_BEAM)

    def locate(self, data):
        subdirs = ("", "data")
        return {
            "train": find_file(data, "train.tsv", subdirs),
            "valid": find_file(data, "dev.tsv", subdirs),
            "test": find_file(data, self.gen, subdirs),
        }

    def prepare(self, files):
        train = read_corpus(files["train"], "cogs")
        return Prepared(
            train=train,
            valid=read_corpus(files["valid"], "cogs"),
            test=read_corpus(files["test"], "cogs"),
            lexcorpus=train,
            files=files,
            score_args=["--categories", files["test"], "--cogs-table3"],
            notes=["train on train.tsv, validate on dev.tsv, test on " + os.path.basename(files["test"])],
        )

    def paper(self):
        # Table 2 (COGS column) and Table 5 (Uniform, Soft, Learned; its LSTM row reads 0.51 +/- 0.06).
        return {
            "lstm": em(0.51, 0.05),
            "copy": em(0.66, 0.03),
            "simple": em(0.82, 0.01),
            "pmi": em(0.82, 0.00),
            "ibm2": em(0.82, 0.00),
            "ibm1": em(0.82, 0.00),
            "bayes": em(0.70, 0.04),
            "uniform": em(0.56, 0.07),
            "soft": em(0.83, 0.00),
            "learned": em(0.83, 0.01),
        }

    def extra_report(self, summary, labels):
        names = []
        for entry in summary.values():
            for name in entry["metrics"]:
                if name.startswith("cogs_table3.") and name.endswith(".exact_match"):
                    row = name[len("cogs_table3.") : -len(".exact_match")]
                    if row not in names:
                        names.append(row)
        if not names:
            return ""
        rows = [["Table 3 row"] + list(summary)] + [
            [row] + [format_mean_std(summary[m]["metrics"].get(f"cogs_table3.{row}.exact_match")) for m in summary]
            for row in names
        ]
        return (
            "== COGS gen exact match per Table 3 row, mean +/- std (the paper's Table 3 has no numbers in our "
            "copy of the text)\n" + table(rows)
        )
