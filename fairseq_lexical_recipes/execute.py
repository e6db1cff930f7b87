"""One run as data (RunSpec: its directory, commands and fingerprint) and the one executor of its steps
(execute_run: train, generate, score, run.json), used by the paper recipes (runner.Runner, so examples/custom), by
examples/cat_oci and examples/pretrained. The rules of the run directory itself (reuse, resume,
refusal, what may be deleted) are rundir.RunDirectory's."""

from __future__ import annotations

import datetime
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional

from fairseq_lexical_recipes import fairseq_log, ownership
from fairseq_lexical_recipes.console import RecipeError, say
from fairseq_lexical_recipes.process import run_logged, run_sharded
from fairseq_lexical_recipes.rundir import RunDirectory
from fairseq_lexical_recipes.textio import write_json


@dataclass
class RunSpec:
    """What one (model, seed) run is; built by the pipelines' pure functions, run by execute_run."""

    who: str  # names the run in messages: "[2/6] lstm seed 1"
    name: str  # names its programs in errors: "fairseq-train (lstm, seed 1)"
    out: str  # its directory
    commands: Mapping[str, List[str]]  # "train", "generate" (stdout: hypotheses), "score" (stdout: score JSON)
    fingerprint: Mapping[str, object]  # what a finished run must agree on to be reused
    config: Mapping[str, object]  # config.json (the fingerprint is added)
    checkpoint: str  # the checkpoint generate decodes
    training: str  # the training message after "training": " (2000 updates max)"
    progress: str  # the prefix of the training's progress lines
    decode_jobs: int = 1
    keep_checkpoints: str = "used"
    run_fields: Mapping[str, object] = field(default_factory=dict)  # more for run.json
    resumable: Callable[[str], bool] = lambda out: True
    why_not: str = "its training cannot resume from {last}"  # why one that is not resumable starts again
    equivalent: Mapping[str, object] = field(default_factory=dict)  # see RunDirectory
    force: bool = False
    index: str = ""  # its number among the invocation's runs, in messages: "[2/6]" ("": not numbered)

    def directory(self) -> RunDirectory:
        return RunDirectory(
            self.out,
            self.fingerprint,
            self.who,
            self.checkpoint,
            force=self.force,
            resumable=self.resumable,
            why_not=self.why_not,
            equivalent=dict(self.equivalent),
        )


@dataclass
class RunOutcome:
    score: dict
    reused: bool  # its score.json was there: nothing ran
    train_s: float = 0.0
    generate_s: float = 0.0
    total_s: float = 0.0
    training: Dict[str, object] = field(default_factory=dict)  # fairseq_log.training_summary (+ after_training)
    added: Dict[str, object] = field(default_factory=dict)  # what after_run added to run.json


def execute_run(
    spec: RunSpec,
    after_training: Optional[Callable[[Dict[str, object]], Dict[str, object]]] = None,
    after_run: Optional[Callable[[RunOutcome], Optional[Mapping[str, object]]]] = None,
) -> RunOutcome:
    """Train (or resume, or reuse a finished training), decode and score one run in spec.out.

    after_training(summary) may add to the training summary (written to train.done); after_run(outcome) runs once
    run.json is written (its failure leaves the run finished) and what it returns is added to run.json; the
    checkpoints not used are removed last (--keep-checkpoints)."""
    rundir = spec.directory()
    state = rundir.open(dict(spec.config))
    if state.score is not None:
        return RunOutcome(state.score, reused=True)
    with ownership.writing(spec.out):  # what fairseq and the steps below write there is the pipeline's
        return _execute(spec, rundir, state, after_training, after_run)


def _execute(spec, rundir, state, after_training, after_run) -> RunOutcome:
    out, start = spec.out, time.time()
    if state.trained is None:
        if state.trained_unrecorded_s is not None:
            train_s = state.trained_unrecorded_s
        else:
            say(f"{spec.who}: training{spec.training} ...")
            train_s = run_logged(
                spec.commands["train"],
                f"{out}/train.log",
                what=f"fairseq-train ({spec.name})",
                append=state.resuming,
                progress=spec.progress,
            )
        training = fairseq_log.training_summary(f"{out}/train.log")
        if after_training is not None:
            training = after_training(training)
        if not os.path.isfile(spec.checkpoint):
            raise RecipeError(f"{spec.checkpoint} was not written (see {out}/train.log)")
        write_json(f"{out}/train.done", {"train_s": round(train_s, 1), "training": training})
    else:
        train_s, training = state.trained["train_s"], state.trained["training"]
    generate_s = run_sharded(
        spec.commands["generate"],
        spec.decode_jobs,
        f"{out}/generate.txt",
        f"{out}/generate.log",
        what=f"fairseq-generate ({spec.name})",
    )
    score_s = run_logged(
        spec.commands["score"], f"{out}/score.json.tmp", f"{out}/score.log", what=f"score.py ({spec.name})"
    )
    score = rundir.write_score(f"{out}/score.json.tmp")
    total = time.time() - start + (train_s if state.trained is not None else 0.0)
    outcome = RunOutcome(score, False, train_s, generate_s, total, training)
    run = {
        "train_s": round(train_s, 1),
        "generate_s": round(generate_s, 1),
        "score_s": round(score_s, 1),
        "total_s": round(total, 1),
        "training": training,
        "finished": datetime.datetime.now().isoformat(),
        "host": platform.node(),
        **spec.run_fields,
    }
    write_json(f"{out}/run.json", run)
    if after_run is not None:
        outcome.added = dict(after_run(outcome) or {})
        if outcome.added:
            write_json(f"{out}/run.json", {**run, **outcome.added})
    rundir.clean_checkpoints(spec.keep_checkpoints)
    return outcome
