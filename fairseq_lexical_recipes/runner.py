"""The recipes' runner (Runner): runs a recipe's plan (recipe.Recipe) in its work directory. Data preparation, the
lexicons, fairseq-preprocess and the checks before anything is written; then each (model, seed) run of the plan,
executed (execute.execute_run) or reused (finished runs are skipped, unfinished ones resumed), in this process or as
--jobs children (jobs.py), a row's seeds trained together first with --replicas; last the report (reports.Report).

A recipe's work after its checks is a sequence of stages (Stage: what it prepares, then the runs that read it, planned
once it is prepared), run by run_stages; each plan's runs in this process go through execute_runs. The paper recipes
are one stage (Runner.stage); examples/cat_oci has one per training size (tasks/cat_oci/runner.py)."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence

from lexical_offline.textio import holds, parallel_bytes, write_parallel

from fairseq_lexical_recipes import commands, fairseq_log, lexicons, lla, ownership
from fairseq_lexical_recipes.catalogue import MODELS
from fairseq_lexical_recipes.console import RecipeError, hms, pair_name, say, show
from fairseq_lexical_recipes.execute import RunOutcome, RunSpec, execute_run
from fairseq_lexical_recipes.fairseq_log import finished_training_seconds
from fairseq_lexical_recipes.families import LLA, TRANSFORMER
from fairseq_lexical_recipes.invocation import check_extra_options
from fairseq_lexical_recipes.jobs import run_jobs
from fairseq_lexical_recipes.overview import say_dry_run, say_settings
from fairseq_lexical_recipes.process import child_env, run_logged
from fairseq_lexical_recipes.recipe import Inputs, Plan, Recipe
from fairseq_lexical_recipes.reports import Report
from fairseq_lexical_recipes.rundir import (
    PREPROCESS_WRITES,
    RUN_WRITES,
    RunDirectory,
    lock_work_directory,
    refuse_foreign_writes,
    remove_owned,
    training_ended,
)
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks import Prepared
from fairseq_lexical_recipes.textio import write_json
from fairseq_lexical_recipes.vocabulary import data_warnings

THREADS_RULE = "as set, else the cores idle at the start"


def stale_runs_error(problems: Sequence[str], note: str = "") -> RecipeError:
    return RecipeError(
        "finished runs, or unfinished ones with a checkpoint, made with other settings (the train/generate/score "
        "commands, data or lexicon differ):\n  "
        + "\n  ".join(problems)
        + "\nuse --force to re-run them, or another --work"
        + note
    )


@dataclass(frozen=True)
class Stage:
    """Part of a recipe's work: ``prepare`` writes what its runs read (data, data-bins, lexicons); ``plan`` plans those
    runs once it has (their fingerprints hold what it made: the data's SHA-1, the lexicon's) and returns their plan,
    an object whose ``runs`` maps each run's key to its execute.RunSpec, in the order they run (recipe.Plan)."""

    prepare: Callable[[], None]
    plan: Callable[[], Any]


def run_stages(stages: Iterable[Stage], execute: Callable[[Any], object], prepare_only: bool = False) -> List[Any]:
    """Each stage in turn: prepared, planned, its plan executed (``execute``); with ``prepare_only`` only prepared.
    Returns the plans, in order (what the report reads)."""
    plans = []
    for stage in stages:
        stage.prepare()
        if prepare_only:
            continue
        plan = stage.plan()
        execute(plan)
        plans.append(plan)
    return plans


def execute_runs(runs: Mapping[Hashable, RunSpec], run_one: Callable[[Hashable, RunSpec], object]) -> None:
    """The runs of a plan in this process, one after the other, in order: ``run_one(key, run)`` executes one
    (execute.execute_run, with what its recipe adds) and says its result."""
    for key, run in runs.items():
        run_one(key, run)


class Runner:
    """Runs ``recipe`` in its WORK; ``report``: what it writes after the runs (the paper's tables by default,
    examples/custom's report folder)."""

    def __init__(self, recipe: Recipe, report: Optional[Report] = None):
        self.recipe, self.invocation = recipe, recipe.invocation
        self.report = report or Report()
        self.data_sha1 = ""  # of the prepared data (prepared_pairs)
        self.lexicon_sha1_aside: Dict[str, str] = {}  # check_before_writing's lexicons built aside

    # -- preparation --------------------------------------------------------------------------------------------
    def prepare(self) -> Prepared:
        """The task's pairs, checked against WORK (check_before_writing), then written with their data-bins."""
        prep = self.prepared_pairs()
        self.check_before_writing(prep)
        self.write_data(prep)
        return prep

    def prepared_pairs(self) -> Prepared:
        """The task's pairs, in memory, and their SHA-1 (self.data_sha1): nothing is written."""
        prep = self.invocation.task.prepare(dict(self.invocation.files))
        # the SHA-1 of the files about to be written (sha1_files' of them): finished runs of other data are refused
        # before WORK/data, the data-bin and the lexicons they were made from are replaced
        digest = hashlib.sha1()
        for name, pairs in self.splits(prep).items():
            for data in parallel_bytes(pairs):
                digest.update(data + b"\0")
        self.data_sha1 = digest.hexdigest()
        return prep

    def inputs(self, prep: Prepared) -> Inputs:
        """What the runs take from the prepared data (recipe.Inputs)."""
        return Inputs(tuple(prep.score_args), self.data_sha1, dict(self.lexicon_sha1_aside))

    @staticmethod
    def splits(prep: Prepared) -> Dict[str, list]:
        """WORK/data's files: train, valid (train where the task has none), test and the lexicon's corpus."""
        return {
            "train": prep.train,
            "valid": prep.valid if prep.valid is not None else prep.train,
            "test": prep.test,
            "lexcorpus": prep.lexcorpus,
        }

    def write_data(self, prep: Prepared) -> None:
        """WORK/data (a file is rewritten only where its content changes), the data-bins, the lexicons."""
        inv, layout = self.invocation, self.invocation.layout
        splits = self.splits(prep)
        if not all(self.data_written(name, pairs) for name, pairs in splits.items()):  # (--jobs children: written)
            with ownership.writing(layout.data):
                for name, pairs in splits.items():
                    write_parallel(f"{layout.data}/{name}", pairs)  # (a file whose content is the same stays)
        say(
            f"== data: {len(prep.train)} train, "
            + (f"{len(prep.valid)} validation, " if prep.valid is not None else "")
            + f"{len(prep.test)} test pairs from {', '.join(sorted(set(inv.files.values())))}"
        )
        for note in prep.notes + data_warnings(prep):
            say(f"   {note}")
        self.preprocess(layout.bin, self.recipe.preprocess_command(joined=False), "preprocess.log")
        if any(MODELS[m].joined_dictionary for m in inv.models):
            self.preprocess(layout.bin_joined, self.recipe.preprocess_command(joined=True), "preprocess_joined.log")

    def data_written(self, name: str, pairs) -> bool:
        """Whether WORK/data/NAME.src and .tgt hold ``pairs`` already."""
        src, tgt = parallel_bytes(pairs)
        data = self.invocation.layout.data
        return holds(f"{data}/{name}.src", src) and holds(f"{data}/{name}.tgt", tgt)

    def planned_writes(self) -> List[str]:
        """The files outside the run directories this invocation may write (the data-bins' are checked by name)."""
        inv, w = self.invocation, self.invocation.work
        paths = [f"{w}/config.json", f"{w}/summary.json", f"{w}/preprocess.log", f"{w}/preprocess_joined.log"]
        paths += [
            f"{inv.layout.data}/{n}.{ext}" for n in ("train", "valid", "test", "lexcorpus") for ext in ("src", "tgt")
        ]
        for method in self.recipe.lexicon_methods():
            if not self.recipe.given_lexicon(method):
                paths += [f"{inv.layout.lexicons}/{method}.{ext}" for ext in ("tsv", "log", "json")]
        if inv.concurrent:
            paths += [f"{w}/jobs/{model}_seed{seed}.log" for model, seed in inv.pairs]
        return paths + self.report.writes(self.recipe)

    def check_before_writing(self, prep: Prepared, build_aside: bool = True) -> None:
        """Everything that can refuse this invocation, with nothing written: a file the pipeline would write over
        that it did not write (WORK, its data, data-bins and lexicons, every run's directory), runs made from other
        data or with other settings."""
        layout = self.invocation.layout
        found = ownership.foreign(self.planned_writes())
        for destdir in (layout.bin, layout.bin_joined):
            found += ownership.foreign_in(destdir, PREPROCESS_WRITES)
        for model, seed in self.invocation.pairs:
            found += ownership.foreign_in(self.recipe.run_dir(model, seed), RUN_WRITES)
        ownership.refuse_foreign(found, "this run of the pipeline")
        self.refuse_runs_of_other_data()  # first: no lexicon is built aside for runs of other data
        if build_aside:
            self.lexicon_sha1_aside = {
                m: sha1
                for m in self.recipe.lexicon_methods()
                if (sha1 := lexicons.to_be_built(self.recipe, m, prep, self.data_sha1)) is not None
            }
        self.check_finished_runs(prep)

    def refuse_runs_of_other_data(self) -> None:
        """A RecipeError if a finished run of this invocation, or an unfinished one with a checkpoint, was made from
        other data (check_finished_runs checks the rest, once the lexicons' content is known)."""
        if self.invocation.options.force:
            return
        # the data part of each run's fingerprint (a run that recorded none is not refused for it)
        data_only = {"data_sha1": self.data_sha1}
        other = [
            why
            for model, seed in self.invocation.pairs
            if (
                why := RunDirectory(
                    self.recipe.run_dir(model, seed), data_only, "", "", equivalent={"data_sha1": None}
                ).stale()
            )
        ]
        if other:
            raise stale_runs_error(other, " (nothing was written)")

    def preprocess(self, destdir: str, cmd: List[str], log: str) -> None:
        work = self.invocation.work
        step = Step(
            "fairseq-preprocess",
            destdir + "/prepared.json",
            {"data_sha1": self.data_sha1, "command": commands.stamp_command(cmd, work)},
            [f"{destdir}/dict.{side}.txt" for side in ("src", "tgt")],
            equivalent={"command": show(cmd)},  # recorded before stamps were portable
        )

        def make():
            remove_owned(destdir)  # an earlier data-bin (check_before_writing refused files not the pipeline's)
            run_logged(cmd, work + "/" + log, what="fairseq-preprocess")

        secs = None
        if not step.up_to_date():  # (--jobs children find it so: they write nothing here)
            with ownership.writing(work), ownership.writing(destdir):
                secs = step.run(make)
        if secs is None:
            say(f"== fairseq-preprocess: up to date ({destdir})")
        else:
            say(f"== fairseq-preprocess: {destdir} ({hms(secs)})")

    def stale(self, model: str, seed: int, prep: Prepared) -> Optional[str]:
        """Why the run of (model, seed), finished or with a checkpoint, does not match the current settings, or
        None."""
        return self.recipe.run(model, seed, self.inputs(prep)).directory().stale()

    def check_finished_runs(self, prep: Prepared) -> None:
        """Every run's whole fingerprint (the lexicons' as this invocation will build them), before anything is
        written."""
        problems = [p for model, seed in self.invocation.pairs if (p := self.stale(model, seed, prep))]
        if problems:
            raise stale_runs_error(problems, " (nothing was written)")

    # -- the runs ------------------------------------------------------------------------------------------------
    def stage(self, prep: Prepared) -> Stage:
        """The paper recipes' one stage: WORK/data, its data-bins and the lexicons, then every (model, seed) run."""

        def prepare() -> None:
            self.write_data(prep)
            lexicons.build(self.recipe, self.data_sha1)
            self.lexicon_sha1_aside = {}  # built now: the fingerprints read the files

        return Stage(prepare, lambda: self.recipe.plan(self.inputs(prep)))

    def execute(self, plan: Plan, prep: Prepared) -> List[str]:
        """The plan's runs: a row's seeds trained together first (--replicas), then every pair, as --jobs children
        or in this process. Returns the failed pairs (--jobs), with their logs."""
        inv, options = self.invocation, self.invocation.options
        for model in inv.models:  # (a --jobs child has one seed: nothing to train together)
            if self.recipe.replicated(model):
                self.train_replicas(model, prep)
        if inv.concurrent:  # one pair: in this process
            return run_jobs(plan)
        if not options.as_job:
            say(f"== {child_env()['OMP_NUM_THREADS']} CPU thread(s) per program (OMP_NUM_THREADS: {THREADS_RULE})")
        execute_runs(plan.runs, self.run_one)
        return []

    def run_one(self, pair: Hashable, run: RunSpec) -> Optional[dict]:
        """Execute ``run``, the plan's (model, seed), and say its result; --damage after it (lla rows)."""
        (model, seed), index = pair, run.index
        inv, family = self.invocation, MODELS[model].family
        damage = inv.damage is not None and family.damage

        def after_run(outcome: RunOutcome) -> Optional[dict]:
            if not damage:
                return None
            t0 = time.time()
            self.run_damage(run, model, seed, index)
            return {"damage_s": round(time.time() - t0, 1)}

        prefix = f"{index}    {pair_name(model, seed)}"
        outcome = execute_run(
            run,
            after_training=(lambda training: lla.with_selection(inv.lla, run.out, prefix, training))
            if family.reads_selection(inv.lla)
            else None,
            after_run=after_run,
        )
        result = inv.task.result_line(outcome.score)
        if outcome.reused:
            say(f"{index} seed {seed}  {model}  {result}  (done before: skipped)")
            if damage:
                self.run_damage(run, model, seed, index)
            return outcome.score
        stopped = outcome.training
        say(
            f"{index} seed {seed}  {model}  {result}  "
            f"(train {hms(outcome.train_s)}{', ' + stopped['text'] if stopped['text'] else ''}; "
            f"decode {hms(outcome.generate_s)}; total {hms(outcome.total_s)})"
        )
        return outcome.score

    def run_damage(self, run: RunSpec, model: str, seed: int, index: str) -> None:
        command = self.recipe.damage_command(model, seed, run.out)
        lla.run_damage(command, run.checkpoint, run.out, model, seed, index, self.invocation.options.force)

    # -- everything -----------------------------------------------------------------------------------------------
    def config(self) -> Dict[str, object]:
        inv = self.invocation
        return {
            "task": inv.task.name,
            "split": getattr(inv.task, "split", None),
            "settings": inv.settings,
            "settings_label": inv.settings_label,
            "hparams": asdict(inv.hp),
            "models": {m: self.recipe.label(m) for m in inv.models},
            "seeds": list(inv.seeds),
            "lla": (
                {**asdict(inv.lla), "paper_schedule": inv.lla.is_paper(), "damage": inv.damage}
                if inv.models_of(LLA)
                else None
            ),
            "transformer": asdict(inv.ts) if inv.models_of(TRANSFORMER) else None,
            "data": dict(inv.files),
            "work": inv.work,
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "date": datetime.datetime.now().isoformat(),
            "host": platform.node(),
            "python": sys.version.split()[0],
        }

    def run(self) -> int:
        t0 = time.time()
        inv, recipe, options = self.invocation, self.recipe, self.invocation.options
        split = getattr(inv.task, "split", "")
        say(f"== {inv.task.name}{' ' + split if split else ''}: work directory {inv.work}")
        say_settings(recipe)
        first = inv.seeds[0]
        check_extra_options(options, {m: recipe.commands(m, first, recipe.run_dir(m, first)) for m in inv.models})
        if options.dry_run:
            say_dry_run(recipe)
            self.say_replica_groups()
            return 0
        prep = self.prepared_pairs()
        self.check_before_writing(prep)  # a refusal leaves WORK as it was
        os.makedirs(inv.work, exist_ok=True)
        if not options.as_job:  # --jobs children and campaign runs work under their parent's lock
            self._lock = lock_work_directory(inv.work)
            self.check_before_writing(prep, build_aside=False)  # unchanged since, now that no other recipe can
            # a WORK of an earlier version: its files are recorded by their names, as it saw them
            layout = inv.layout
            report_dirs = sorted({os.path.dirname(p) for p in self.report.writes(recipe)})
            ownership.adopt(
                [layout.data, layout.bin, layout.bin_joined, layout.lexicons, inv.work + "/jobs"]
                + report_dirs
                + [recipe.run_dir(m, s) for m, s in inv.pairs]
                + [inv.work]
            )
            with ownership.writing(inv.work):  # the parent's config.json holds the whole invocation
                write_json(inv.work + "/config.json", self.config())
        failed: List[str] = []

        def execute(plan: Plan) -> None:
            failed.extend(self.execute(plan, prep))

        plans = run_stages([self.stage(prep)], execute, options.prepare_only)
        if options.prepare_only:
            say(f"== prepared (--prepare-only): {inv.work}; no model trained")
            return 0
        if not options.as_job:  # the parent reports over every pair
            with ownership.writing(inv.work):
                self.report.write(plans[0], time.time() - t0)
        if failed:
            raise RecipeError(
                f"{len(failed)} of {len(inv.pairs)} (model, seed) pairs failed "
                "(the table above is over the others):\n  " + "\n  ".join(failed)
            )
        return 0

    # -- a row's seeds trained together (--replicas) ---------------------------------------------------------------
    def replica_group(self, model: str) -> List[int]:
        """The seeds of ``model`` to train together: those whose training has not ended, and which have no
        checkpoint of their own unless an earlier group of exactly these seeds left its stacked one (a seed with a
        checkpoint of a run alone resumes alone)."""
        run_dir = self.recipe.run_dir
        todo = [seed for seed in self.invocation.seeds if not training_ended(run_dir(model, seed))]
        if os.path.isfile(f"{self.recipe.replica_dir(model, todo)}/checkpoint_last.pt"):
            return todo
        return [s for s in todo if not os.path.isfile(f"{run_dir(model, s)}/checkpoint_last.pt")]

    def say_replica_groups(self) -> None:
        """--dry-run: the rows whose seeds would train together, with that command."""
        planned = None
        for model in self.invocation.models:
            group = self.replica_group(model) if self.recipe.replicated(model) else []
            if len(group) > 1:
                planned = planned or self.recipe.planned_runs()
                command = self.recipe.replica_command(model, group, planned[(model, group[0])].commands["train"])
                seeds = ",".join(map(str, group))
                say(f"== {model} seeds {seeds}: trained together first (--replicas), then decoded one by one:")
                say(f"   {show(command)}")

    def train_replicas(self, model: str, prep: Prepared) -> None:
        """Train the seeds of ``replica_group`` in one process; each seed's run directory then holds its checkpoints
        and the log, as a training that ended (execute_run decodes it)."""
        group = self.replica_group(model)
        if len(group) < 2:
            return
        specs = {seed: self.recipe.run(model, seed, self.inputs(prep)) for seed in group}
        folder = self.recipe.replica_dir(model, group)
        for spec in specs.values():
            spec.directory().check()
        refuse_foreign_writes(folder, RUN_WRITES, f"the replicas of {model}")
        os.makedirs(folder, exist_ok=True)
        resuming = ownership.owns(f"{folder}/checkpoint_last.pt")
        first = specs[group[0]]
        command = self.recipe.replica_command(model, group, first.commands["train"])
        record = {"model": model, "seeds": group, "folder": folder, "command": show(command)}
        with contextlib.ExitStack() as stack:
            for directory in [folder, *(spec.out for spec in specs.values())]:
                stack.enter_context(ownership.writing(directory))
            for spec in specs.values():
                spec.directory().open(dict(spec.config))
                write_json(f"{spec.out}/replicas.json", record)
            write_json(f"{folder}/config.json", record)
            seeds = ",".join(map(str, group))
            say(f"{model} seeds {seeds}: training together (--replica-seeds){first.training} ...")
            run_logged(
                command,
                f"{folder}/train.log",
                what=f"fairseq-train ({model}, seeds {seeds} together)",
                append=resuming,
                progress=f"    {model} seeds {seeds}: ",
            )
            seconds = finished_training_seconds(f"{folder}/train.log") or 0.0
            training = {**fairseq_log.training_summary(f"{folder}/train.log"), "replicas": record}
            for spec in specs.values():  # each seed's run: its training ended (execute_run decodes it)
                shutil.copyfile(f"{folder}/train.log", f"{spec.out}/train.log")
                if not os.path.isfile(spec.checkpoint):
                    raise RecipeError(f"{spec.checkpoint} was not written (see {folder}/train.log)")
                write_json(f"{spec.out}/train.done", {"train_s": round(seconds, 1), "training": training})
            if self.invocation.options.keep_checkpoints != "all":  # the stacked checkpoints serve a resume only
                for name in sorted(os.listdir(folder)):
                    if name.endswith(".pt"):
                        ownership.remove(f"{folder}/{name}")
