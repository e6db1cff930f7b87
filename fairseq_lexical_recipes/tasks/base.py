"""What a dataset task of the recipes defines (Task): its data layout, preparation, settings and the papers'
numbers; and the prepared data (Prepared) the pipeline runs on."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.settings import PRESETS, HParams


@dataclass
class Prepared:
    train: List[Tuple[str, str]]
    valid: Optional[List[Tuple[str, str]]]  # None: no validation set (Colors: the training set stands in)
    test: List[Tuple[str, str]]
    lexcorpus: List[Tuple[str, str]]  # what the lexicons are learned from
    files: Dict[str, str]  # role -> data file read
    notes: List[str] = field(default_factory=list)
    score_args: List[str] = field(default_factory=list)  # task-specific tools/score.py options


class Task:
    name = ""
    title = ""
    default_models = "paper"
    paper_models: Tuple[str, ...] = ()
    paper_seeds = 1
    columns: Tuple[Tuple[str, str], ...] = (("exact_match", "exact match"),)
    paper_table = ""
    lexicon_build_args: Tuple[str, ...] = ()
    default_jobs = 1  # --jobs when not given
    # the task's own options (add_args): attributes of the instance, their class values the defaults
    own_options: Tuple[str, ...] = ()
    # Thrush (2020), for the lla rows: Table 1 (one run each, in %; no std given), Table 2's damage precision (%),
    # and the example sentence of Table 2 (decoded under every damage condition)
    thrush_paper: Dict[str, Dict[str, float]] = {}
    thrush_damage_paper: Dict[str, float] = {}
    damage_examples: Tuple[str, ...] = ()
    # Thrush's validation metric for the lla rows' model selection: (fairseq's logged name, extra fairseq-train
    # options); exact match, the criterion's greedy one, "unless otherwise stated"
    lla_selection: Tuple[str, Tuple[str, ...]] = ("exact_match", ())

    def __init__(self, **options: object):
        """One invocation's task, with its own options (``own_options``) where they differ from the defaults."""
        unknown = sorted(set(options) - set(self.own_options))
        if unknown:
            raise RecipeError(f"{self.name}: no option {', '.join(unknown)} (its own: {', '.join(self.own_options)})")
        for name, value in options.items():
            setattr(self, name, value)

    def argv(self) -> List[str]:
        """The task's own options as the command line spells them (after TASK)."""
        return [f"--{name.replace('_', '-')}={getattr(self, name)}" for name in self.own_options]

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        pass

    def default_data(self) -> Optional[str]:
        return None

    def default_work(self) -> str:
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_{self.name}")

    def hparams(self, preset: str) -> HParams:
        return PRESETS[preset]

    def patience_for(self, model: str, hp: HParams, patience_given: bool) -> Optional[int]:
        return hp.patience

    def locate(self, data: str) -> Dict[str, str]:
        raise NotImplementedError

    def prepare(self, files: Dict[str, str]) -> Prepared:
        raise NotImplementedError

    def paper(self) -> Dict[str, Dict[str, Tuple[float, float]]]:
        return {}

    def result_line(self, score: dict) -> str:
        return f"exact match {score['exact_match']:.4f}"

    def extra_report(self, summary, labels) -> str:
        return ""


def find_file(data: str, name: str, subdirs: Sequence[str] = ("",)) -> str:
    """DATA/<subdir>/<name> for the first subdir where it exists; else an error naming every place looked at."""
    tried = []
    for sub in subdirs:
        path = os.path.join(data, sub, name) if sub else os.path.join(data, name)
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise RecipeError(f"data file not found: {name} (looked for {' and '.join(tried)})")


# Exact match, mean +/- std over seeds, as printed in Table 2 (16 seeds for Colors, 10 for SCAN and COGS).
def em(mean, std):
    return {"exact_match": (mean, std)}
