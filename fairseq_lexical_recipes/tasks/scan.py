"""SCAN (Lake & Baroni 2018), jump and around_right splits: Akyurek & Andreas 2021, section 5.2, Table 2."""

import math
import os
import random
from dataclasses import replace

from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.settings import AUTHORS_TEST_BEAM
from fairseq_lexical_recipes.tasks.base import Prepared, Task, em, find_file
from fairseq_lexical_recipes.textio import read_corpus


SCAN_SPLITS = {
    # split: (folder in brendenlake/SCAN, train file, test file)
    "jump": ("add_prim_split", "tasks_train_addprim_jump.txt", "tasks_test_addprim_jump.txt"),
    "around_right": ("template_split", "tasks_train_template_around_right.txt", "tasks_test_template_around_right.txt"),
}


class Scan(Task):
    name = "scan"
    paper_models = ("lstm", "simple", "pmi", "ibm2", "ibm1", "bayes")
    paper_seeds = 10
    paper_table = "Table 2"
    own_options = ("split", "valid_fraction", "valid_seed")
    split = "jump"
    valid_fraction = 0.01
    valid_seed = 0

    def add_args(self, parser):
        g = parser.add_argument_group("SCAN")
        g.add_argument(
            "--split",
            choices=sorted(SCAN_SPLITS),
            default=self.split,
            help="jump (add_prim_split) or around_right (template_split); default jump",
        )
        g.add_argument(
            "--valid-fraction",
            type=float,
            default=self.valid_fraction,
            help="share of the training file held out for validation (default 0.01, as the authors' "
            "code; at least one pair)",
        )
        g.add_argument("--valid-seed", type=int, default=self.valid_seed, help="seed of the held-out draw (default 0)")

    def default_work(self):
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_scan_{self.split}")

    def hparams(self, preset):
        # Appendix C.1: "For SCAN and Colors, we applied additional dropout (p=0.5) in the last layer of p_write";
        # the authors' SCAN scripts apply it to the lexical models only (the plain LSTM has no p_write).
        return replace(
            super().hparams(preset), write_dropout=0.5, write_dropout_models="lexical", beam=AUTHORS_TEST_BEAM
        )

    def patience_for(self, model, hp, patience_given):
        # The authors' SCAN scripts: tolerance 20 for Simple, PMI and Bayesian, 10 for the LSTM and IBM runs.
        if hp.patience is not None and model in ("simple", "pmi", "bayes") and not patience_given:
            return 20
        return hp.patience

    def locate(self, data):
        folder, train, test = SCAN_SPLITS[self.split]
        return {"train": find_file(data, train, (folder, "")), "test": find_file(data, test, (folder, ""))}

    def prepare(self, files):
        full = read_corpus(files["train"], "scan")
        n_valid = max(1, int(math.floor(len(full) * self.valid_fraction)))
        if n_valid >= len(full):
            raise RecipeError(f"{files['train']}: {len(full)} pairs are too few to hold out {n_valid} for validation")
        held = set(random.Random(self.valid_seed).sample(range(len(full)), n_valid))
        train = [p for i, p in enumerate(full) if i not in held]
        valid = [p for i, p in enumerate(full) if i in held]
        return Prepared(
            train=train,
            valid=valid,
            test=read_corpus(files["test"], "scan"),
            lexcorpus=full,
            files=files,
            notes=[
                f"validation: {n_valid} of {len(full)} training pairs held out (fraction {self.valid_fraction}, "
                f"seed {self.valid_seed}); the lexicons are learned from the whole training file"
            ],
        )

    def paper(self):
        if self.split == "jump":
            return {
                "lstm": em(0.00, 0.00),
                "simple": em(0.92, 0.17),
                "pmi": em(0.95, 0.08),
                "ibm2": em(0.79, 0.27),
                "ibm1": em(0.79, 0.27),
                "bayes": em(0.82, 0.21),
            }
        return {
            "lstm": em(0.09, 0.05),
            "simple": em(0.95, 0.01),
            "pmi": em(0.02, 0.04),
            "ibm2": em(0.00, 0.00),
            "ibm1": em(0.00, 0.00),
            "bayes": em(0.02, 0.04),
        }
