"""The recipes' pipeline (Recipe): data preparation, lexicons, fairseq-preprocess, then for each model and seed the
training, decoding and scoring commands (fairseq_lexical_recipes.commands), run or reused (finished runs are skipped,
unfinished ones
resumed)."""

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
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence, Tuple

from lexical_offline.textio import holds, parallel_bytes, write_parallel

from fairseq_lexical_recipes import ROOT, commands, fairseq_log, lla, ownership, reports
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS, ModelSpec
from fairseq_lexical_recipes.commands import LOG_FORMAT, RESUME_SAVE
from fairseq_lexical_recipes.console import RecipeError, hms, say, show
from fairseq_lexical_recipes.execute import RunOutcome, RunSpec, execute_run
from fairseq_lexical_recipes.jobs import run_jobs
from fairseq_lexical_recipes.lexicons import LexiconSteps
from fairseq_lexical_recipes.families import LLA, TRANSFORMER
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.overview import say_dry_run, say_settings
from fairseq_lexical_recipes.fairseq_log import finished_training_seconds
from fairseq_lexical_recipes.process import child_env, cuda_visible, run_logged
from fairseq_lexical_recipes.rundir import (
    PREPROCESS_WRITES,
    RUN_WRITES,
    RunDirectory,
    lock_work_directory,
    refuse_foreign_writes,
    remove_owned,
    training_ended,
)
from fairseq_lexical_recipes.invocation import check_extra_options, check_options
from fairseq_lexical_recipes.settings import arch_size, max_update_of
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks import Prepared, Task
from fairseq_lexical_recipes.textio import sha1_files, sha1_lexicon_entries, write_json
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


class Recipe(LexiconSteps):
    """One invocation of a recipe: a task with its own options and the invocation's options (RecipeOptions: the
    command line's, or given by a program), checked (invocation.check_options) into the models and seeds to run and
    their settings. ``settings``: the name and label of a preset that is not the recipes' (examples/custom's)."""

    def __init__(self, task: Task, options: RecipeOptions, settings: Optional[Tuple[str, str]] = None):
        self.invocation = inv = check_options(task, options, settings)
        self.task, self.options, self.work, self.layout, self.files = task, options, inv.work, inv.layout, inv.files
        self.hp, self.ts, self.lla = inv.hp, inv.ts, inv.lla
        self.models, self.seeds, self.jobs, self.damage = list(inv.models), list(inv.seeds), inv.jobs, inv.damage
        self.transformer_models, self.lla_models = inv.models_of(TRANSFORMER), inv.models_of(LLA)
        self.settings, self.settings_label = inv.settings, inv.settings_label
        self.data_sha1 = ""
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
        prep = self.task.prepare(self.files)
        # the SHA-1 of the files about to be written (sha1_files' of them): finished runs of other data are refused
        # before WORK/data, the data-bin and the lexicons they were made from are replaced
        digest = hashlib.sha1()
        for name, pairs in self.splits(prep).items():
            for data in parallel_bytes(pairs):
                digest.update(data + b"\0")
        self.data_sha1 = digest.hexdigest()
        return prep

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
        splits = self.splits(prep)
        if not all(self.data_written(name, pairs) for name, pairs in splits.items()):  # (--jobs children: written)
            with ownership.writing(self.layout.data):
                for name, pairs in splits.items():
                    write_parallel(f"{self.layout.data}/{name}", pairs)  # (a file whose content is the same stays)
        say(
            f"== data: {len(prep.train)} train, "
            + (f"{len(prep.valid)} validation, " if prep.valid is not None else "")
            + f"{len(prep.test)} test pairs from {', '.join(sorted(set(self.files.values())))}"
        )
        for note in prep.notes + data_warnings(prep):
            say(f"   {note}")
        self.preprocess(self.layout.bin, self.preprocess_command(joined=False), "preprocess.log")
        if any(MODELS[m].joined_dictionary for m in self.models):
            self.preprocess(self.layout.bin_joined, self.preprocess_command(joined=True), "preprocess_joined.log")

    def data_written(self, name: str, pairs) -> bool:
        """Whether WORK/data/NAME.src and .tgt hold ``pairs`` already."""
        src, tgt = parallel_bytes(pairs)
        return holds(f"{self.layout.data}/{name}.src", src) and holds(f"{self.layout.data}/{name}.tgt", tgt)

    def planned_writes(self) -> List[str]:
        """The files outside the run directories this invocation may write (the data-bins' are checked by name)."""
        w = self.work
        paths = [f"{w}/config.json", f"{w}/summary.json", f"{w}/preprocess.log", f"{w}/preprocess_joined.log"]
        paths += [
            f"{self.layout.data}/{n}.{ext}" for n in ("train", "valid", "test", "lexcorpus") for ext in ("src", "tgt")
        ]
        for method in self.lexicon_methods():
            if not self.given_lexicon(method):
                paths += [f"{self.layout.lexicons}/{method}.{ext}" for ext in ("tsv", "log", "json")]
        if self.jobs > 1 and len(self.pairs) > 1:
            paths += [f"{w}/jobs/{model}_seed{seed}.log" for model, seed in self.pairs]
        return paths + self.report_writes()

    def report_writes(self) -> List[str]:
        """The files the report writes besides summary.json (examples/custom's report folder)."""
        return []

    def report_dirs(self) -> List[str]:
        return sorted({os.path.dirname(p) for p in self.report_writes()})

    def check_before_writing(self, prep: Prepared, build_aside: bool = True) -> None:
        """Everything that can refuse this invocation, with nothing written: a file the pipeline would write over
        that it did not write (WORK, its data, data-bins and lexicons, every run's directory), runs made from other
        data or with other settings."""
        found = ownership.foreign(self.planned_writes())
        for destdir in (self.layout.bin, self.layout.bin_joined):
            found += ownership.foreign_in(destdir, PREPROCESS_WRITES)
        for model, seed in self.pairs:
            found += ownership.foreign_in(self.run_dir(model, seed), RUN_WRITES)
        ownership.refuse_foreign(found, "this run of the pipeline")
        self.refuse_runs_of_other_data()  # first: no lexicon is built aside for runs of other data
        if build_aside:
            self.lexicon_sha1_aside = {
                m: sha1 for m in self.lexicon_methods() if (sha1 := self.lexicon_to_be_built(m, prep)) is not None
            }
        self.check_finished_runs(prep)

    def refuse_runs_of_other_data(self) -> None:
        """A RecipeError if a finished run of this invocation, or an unfinished one with a checkpoint, was made from
        other data (check_finished_runs checks the rest, once the lexicons' content is known)."""
        if self.options.force:
            return
        # the data part of each run's fingerprint (a run that recorded none is not refused for it)
        data_only = {"data_sha1": self.data_sha1}
        other = [
            why
            for model, seed in self.pairs
            if (
                why := RunDirectory(
                    self.run_dir(model, seed), data_only, "", "", equivalent={"data_sha1": None}
                ).stale()
            )
        ]
        if other:
            raise stale_runs_error(other, " (nothing was written)")

    def preprocess_command(self, joined: bool) -> List[str]:
        d = self.layout.data
        prefixes = {split: f"{d}/{split}" for split in ("train", "valid", "test")}
        return commands.preprocess(prefixes, self.layout.bin_of(joined), joined=joined)

    def preprocess(self, destdir: str, cmd: List[str], log: str) -> None:
        step = Step(
            "fairseq-preprocess",
            destdir + "/prepared.json",
            {"data_sha1": self.data_sha1, "command": commands.stamp_command(cmd, self.work)},
            [f"{destdir}/dict.{side}.txt" for side in ("src", "tgt")],
            equivalent={"command": show(cmd)},  # recorded before stamps were portable
        )

        def make():
            remove_owned(destdir)  # an earlier data-bin (check_before_writing refused files not the pipeline's)
            run_logged(cmd, self.work + "/" + log, what="fairseq-preprocess")

        secs = None
        if not step.up_to_date():  # (--jobs children find it so: they write nothing here)
            with ownership.writing(self.work), ownership.writing(destdir):
                secs = step.run(make)
        if secs is None:
            say(f"== fairseq-preprocess: up to date ({destdir})")
        else:
            say(f"== fairseq-preprocess: {destdir} ({hms(secs)})")

    def bin_for(self, model: str) -> str:
        """The data-bin of a model: WORK/bin_joined (--joined-dictionary) for pgn, else WORK/bin."""
        return self.layout.bin_of(MODELS[model].joined_dictionary)

    # -- one (model, seed) ---------------------------------------------------------------------------------------
    def arch(self, spec: ModelSpec) -> str:
        return spec.family.arch(spec.arch, arch_size(self.options.preset, self.hp.hidden))

    def label(self, model: str) -> str:
        spec = MODELS[model]
        label = spec.label
        if self.given_lexicon(spec.lexicon):  # the row reads the user's file, not a Simple lexicon
            label = label.replace("Simple", f"{os.path.basename(self.options.lexicon)} (--lexicon)", 1)
        return f"{label} (--arch {self.arch(spec)})"

    def model_args(self, model: str) -> List[str]:
        spec = MODELS[model]
        out = ["--arch", self.arch(spec)]
        if spec.lexicon in LEXICON_METHODS:
            out += ["--lexicon", self.lexicon_path(spec.lexicon)]
            if self.hp.lexicon_top_k and "--lexicon-temperature" not in spec.extra:
                out += ["--lexicon-top-k", str(self.hp.lexicon_top_k)]
        elif spec.lexicon is not None:
            out += ["--lexicon", spec.lexicon]
        out += spec.family.row_options(spec.extra, arch_size(self.options.preset, self.hp.hidden))
        return out + spec.family.added_options(spec, self.hp, self.lla)

    def fairseq_train(self, model: str, seed: int, out: str, **training) -> List[str]:
        """commands.fairseq_train for a row of this invocation: its data-bin and model options, its log interval,
        --train-args; ``training``: the row's criterion, optimisation, batching, schedule and ``after``."""
        return commands.fairseq_train(
            self.bin_for(model),
            self.model_args(model),
            seed,
            out,
            log_interval=self.hp.log_interval,
            extra=self.options.train_args,
            **training,
        )

    def train_command(self, model: str, seed: int, out: str) -> List[str]:
        """The row's family's training (an LSTM row: HParams, appendix C.1's inverse-sqrt schedule; a Transformer
        row: TransformerSettings, fairseq's transformer_iwslt_de_en recipe; validation, patience and the evaluated
        checkpoint the task's for both; an lla row: Thrush's schedule, lla.training)."""
        return self.fairseq_train(
            model, seed, out, **MODELS[model].family.training(self.invocation, self.patience(model))
        )

    def max_update(self, model: str) -> Optional[int]:
        """The row's training length in updates (None: the lla rows, trained in epochs)."""
        return max_update_of(self.task, self.options, model)

    def patience(self, model: str) -> Optional[int]:
        """Early stopping after this many validations without a better loss: the task's rule for the row."""
        return self.task.patience_for(model, self.hp, self.options.patience is not None)

    def checkpoint_path(self, out: str, model: str) -> str:
        """The evaluated checkpoint: the family's (HParams.checkpoint's; the lla rows' is --lla-checkpoint's)."""
        return f"{out}/{MODELS[model].family.evaluated_checkpoint(self.hp, self.lla)}"

    def generate_command(self, out: str, model: str) -> List[str]:
        hp = self.hp
        return commands.fairseq_generate(
            self.bin_for(model),
            self.checkpoint_path(out, model),
            hp.beam,
            hp.gen_batch_size,
            hp.max_len_b,
            extra=self.options.generate_args,
        )

    def score_command(self, out: str, prep_score_args: Sequence[str]) -> List[str]:
        d = self.layout.data
        options = [
            a.replace("TRAIN_SRC", d + "/train.src").replace("TEST_SRC", d + "/test.src") for a in prep_score_args
        ]
        return commands.score(f"{out}/generate.txt", d + "/test.tgt", options)

    def fingerprint(self, model: str, seed: int, commands: Dict[str, List[str]]) -> Dict[str, object]:
        """What a finished run must agree on to be reused: the commands (work directory abstracted), the data and
        the lexicon's content."""

        def norm(cmd):
            return (
                show(cmd)
                .replace(self.work, "$WORK")
                .replace(sys.executable, "python")
                .replace(ROOT, "$REPO")
                .replace(show(RESUME_SAVE), show(RESUME_SAVE[:3]))  # saving more often changes no result
                .replace(LOG_FORMAT, "--log-format simple")
            )  # nor does the log format (runs made before json)

        spec = MODELS[model]
        lex_sha1 = self.lexicon_sha1_aside.get(spec.lexicon)
        if lex_sha1 is None and spec.lexicon in LEXICON_METHODS and os.path.isfile(self.lexicon_path(spec.lexicon)):
            lex_sha1 = sha1_lexicon_entries(self.lexicon_path(spec.lexicon))
        return {"data_sha1": self.data_sha1, "lexicon_sha1": lex_sha1, **{k: norm(v) for k, v in commands.items()}}

    def commands(self, model: str, seed: int, out: str, prep: Prepared) -> Dict[str, List[str]]:
        return {
            "train": self.train_command(model, seed, out),
            "generate": self.generate_command(out, model),
            "score": self.score_command(out, [*prep.score_args, *MODELS[model].family.score_options]),
        }

    def spec(self, model: str, seed: int, prep: Prepared, index: str = "") -> RunSpec:
        """The run of (model, seed): directory, commands, fingerprint, config.json."""
        out, spec, pair = self.run_dir(model, seed), MODELS[model], self.pair_name(model, seed)
        commands = self.commands(model, seed, out, prep)
        fp = self.fingerprint(model, seed, commands)
        # runs finished before the entries-only lexicon fingerprint recorded the whole file's SHA-1
        earlier = {"lexicon_sha1": sha1_files([self.lexicon_path(spec.lexicon)])} if fp.get("lexicon_sha1") else {}
        checkpoint = self.checkpoint_path(out, model)
        config = {
            "task": self.task.name,
            "model": model,
            "label": self.label(model),
            "seed": seed,
            "settings": self.settings,
            "settings_label": self.settings_label,
            "hparams": asdict(self.hp),
            **spec.family.run_config(self.ts),
            "patience": self.patience(model) if self.hp.validate_every else None,
            "lexicon": self.lexicon_path(spec.lexicon) if spec.lexicon in LEXICON_METHODS else spec.lexicon,
            "checkpoint": checkpoint,
            "commands": {k: show(v) for k, v in commands.items()},
        }
        return RunSpec(
            who=f"{index} {pair}" if index else f"the {model} run (seed {seed})",
            name=f"{model}, seed {seed}",
            out=out,
            commands=commands,
            fingerprint=fp,
            config=config,
            checkpoint=checkpoint,
            training=spec.family.training_text(self.hp, self.ts, self.lla),
            progress=f"{index}    {pair}: ",
            decode_jobs=self.options.decode_jobs,
            keep_checkpoints=self.options.keep_checkpoints,
            run_fields={"settings": self.settings},
            **spec.family.resume_rule(self.lla),
            equivalent=earlier,
            force=self.options.force,
        )

    def stale(self, model: str, seed: int, prep: Prepared) -> Optional[str]:
        """Why the run of (model, seed), finished or with a checkpoint, does not match the current settings, or
        None."""
        return self.spec(model, seed, prep).directory().stale()

    def check_finished_runs(self, prep: Prepared) -> None:
        """Every run's whole fingerprint (the lexicons' as this invocation will build them), before anything is
        written."""
        problems = [p for model, seed in self.pairs if (p := self.stale(model, seed, prep))]
        if problems:
            raise stale_runs_error(problems, " (nothing was written)")

    def run_one(self, model: str, seed: int, prep: Prepared, index: str) -> Optional[dict]:
        run, family = self.spec(model, seed, prep, index), MODELS[model].family
        damage = self.damage is not None and family.damage

        def after_run(outcome: RunOutcome) -> Optional[dict]:
            if not damage:
                return None
            t0 = time.time()
            self.run_damage(model, seed, run.out, index)
            return {"damage_s": round(time.time() - t0, 1)}

        prefix = f"{index}    {self.pair_name(model, seed)}"
        outcome = execute_run(
            run,
            after_training=(lambda training: lla.with_selection(self.lla, run.out, prefix, training))
            if family.reads_selection(self.lla)
            else None,
            after_run=after_run,
        )
        if outcome.reused:
            say(f"{index} seed {seed}  {model}  {self.task.result_line(outcome.score)}  (done before: skipped)")
            if damage:
                self.run_damage(model, seed, run.out, index)
            return outcome.score
        stopped = outcome.training
        say(
            f"{index} seed {seed}  {model}  {self.task.result_line(outcome.score)}  "
            f"(train {hms(outcome.train_s)}{', ' + stopped['text'] if stopped['text'] else ''}; "
            f"decode {hms(outcome.generate_s)}; total {hms(outcome.total_s)})"
        )
        return outcome.score

    # -- everything -----------------------------------------------------------------------------------------------
    def config(self) -> Dict[str, object]:
        return {
            "task": self.task.name,
            "split": getattr(self.task, "split", None),
            "settings": self.settings,
            "settings_label": self.settings_label,
            "hparams": asdict(self.hp),
            "models": {m: self.label(m) for m in self.models},
            "seeds": self.seeds,
            "lla": (
                {**asdict(self.lla), "paper_schedule": self.lla.is_paper(), "damage": self.damage}
                if self.lla_models
                else None
            ),
            "transformer": asdict(self.ts) if self.transformer_models else None,
            "data": self.files,
            "work": self.work,
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "date": datetime.datetime.now().isoformat(),
            "host": platform.node(),
            "python": sys.version.split()[0],
        }

    def run(self) -> int:
        t0 = time.time()
        split = getattr(self.task, "split", "")
        say(f"== {self.task.name}{' ' + split if split else ''}: work directory {self.work}")
        say_settings(self)
        prep = Prepared([], None, [], [], {}, score_args=[])
        first = self.seeds[0]
        check_extra_options(
            self.options, {m: self.commands(m, first, self.run_dir(m, first), prep) for m in self.models}
        )
        if self.options.dry_run:
            say_dry_run(self)
            self.say_replica_groups()
            return 0
        prep = self.prepared_pairs()
        self.check_before_writing(prep)  # a refusal leaves WORK as it was
        os.makedirs(self.work, exist_ok=True)
        if not self.options.as_job:  # --jobs children and campaign runs work under their parent's lock
            self._lock = lock_work_directory(self.work)
            self.check_before_writing(prep, build_aside=False)  # unchanged since, now that no other recipe can
            # a WORK of an earlier version: its files are recorded by their names, as it saw them
            ownership.adopt(
                [self.layout.data, self.layout.bin, self.layout.bin_joined, self.layout.lexicons, self.work + "/jobs"]
                + self.report_dirs()
                + [self.run_dir(m, s) for m, s in self.pairs]
                + [self.work]
            )
            with ownership.writing(self.work):  # the parent's config.json holds the whole invocation
                write_json(self.work + "/config.json", self.config())
        self.write_data(prep)
        self.build_lexicons()
        if self.options.prepare_only:
            say(f"== prepared (--prepare-only): {self.work}; no model trained")
            return 0
        for model in self.models:  # (a --jobs child has one seed: nothing to train together)
            if self.replicated(model):
                self.train_replicas(model, prep)
        if self.jobs > 1 and len(self.pairs) > 1:  # one pair: in this process
            failed = run_jobs(self)
        else:
            failed = []
            if not self.options.as_job:
                say(f"== {child_env()['OMP_NUM_THREADS']} CPU thread(s) per program (OMP_NUM_THREADS: {THREADS_RULE})")
            self.run_pairs(prep)
        if not self.options.as_job:  # the parent reports over every pair
            with ownership.writing(self.work):
                self.report(time.time() - t0)
        if failed:
            raise RecipeError(
                f"{len(failed)} of {len(self.pairs)} (model, seed) pairs failed "
                "(the table above is over the others):\n  " + "\n  ".join(failed)
            )
        return 0

    @property
    def pairs(self) -> List[Tuple[str, int]]:
        """The (model, seed) pairs of this invocation in the order they run: every model of a seed, then the next."""
        return [(model, seed) for seed in self.seeds for model in self.models]

    def run_dir(self, model: str, seed: int) -> str:
        """WORK/<model>/seed<N>: the pair's save directory, config.json, logs and score.json."""
        return f"{self.work}/{model}/seed{seed}"

    @staticmethod
    def pair_name(model: str, seed: int) -> str:
        """'<model> seed <N>': how the logs, the failure list and the report's missing list name a pair."""
        return f"{model} seed {seed}"

    def planned_runs(self) -> Dict[Tuple[str, int], RunSpec]:
        """Every (model, seed) run of this invocation as data, in order, with nothing run or written (what --dry-run
        prints). Of the prepared data only the task's scoring options are known yet."""
        prep = Prepared([], None, [], [], {}, score_args=self.task.prepare(self.files).score_args)
        pairs = self.pairs
        return {(m, s): self.spec(m, s, prep, f"[{k}/{len(pairs)}]") for k, (m, s) in enumerate(pairs, 1)}

    # -- a row's seeds trained together (--replicas) ---------------------------------------------------------------
    def replicated(self, model: str) -> bool:
        """Whether ``model``'s seeds train as one process (fairseq-train --replica-seeds): --replicas on, or auto
        where a CUDA GPU is visible; lex_lstm's rows only (not the Transformer or lla rows), two seeds or more."""
        if not MODELS[model].family.replicas or len(self.seeds) < 2 or self.options.replicas == "off":
            return False
        return self.options.replicas == "on" or cuda_visible()

    def replica_dir(self, model: str, seeds: Sequence[int]) -> str:
        """WORK/<model>/replicas-1-2-3: the stacked checkpoints (for resuming), the group's config.json and log."""
        return commands.replicas_dir(f"{self.work}/{model}", seeds)

    def replica_group(self, model: str) -> List[int]:
        """The seeds of ``model`` to train together: those whose training has not ended, and which have no
        checkpoint of their own unless an earlier group of exactly these seeds left its stacked one (a seed with a
        checkpoint of a run alone resumes alone)."""
        todo = [seed for seed in self.seeds if not training_ended(self.run_dir(model, seed))]
        if os.path.isfile(f"{self.replica_dir(model, todo)}/checkpoint_last.pt"):
            return todo
        return [s for s in todo if not os.path.isfile(f"{self.run_dir(model, s)}/checkpoint_last.pt")]

    def replica_command(self, model: str, group: Sequence[int], train: Sequence[str]) -> List[str]:
        """The one fairseq-train of ``group`` (``train``: the first seed's own command)."""
        return commands.replicated_train(train, group, self.replica_dir(model, group), self.run_dir(model, "{seed}"))

    def say_replica_groups(self) -> None:
        """--dry-run: the rows whose seeds would train together, with that command."""
        planned = None
        for model in self.models:
            group = self.replica_group(model) if self.replicated(model) else []
            if len(group) > 1:
                planned = planned or self.planned_runs()
                command = self.replica_command(model, group, planned[(model, group[0])].commands["train"])
                seeds = ",".join(map(str, group))
                say(f"== {model} seeds {seeds}: trained together first (--replicas), then decoded one by one:")
                say(f"   {show(command)}")

    def train_replicas(self, model: str, prep: Prepared) -> None:
        """Train the seeds of ``replica_group`` in one process; each seed's run directory then holds its checkpoints
        and the log, as a training that ended (execute_run decodes it)."""
        group = self.replica_group(model)
        if len(group) < 2:
            return
        specs = {seed: self.spec(model, seed, prep) for seed in group}
        folder = self.replica_dir(model, group)
        for spec in specs.values():
            spec.directory().check()
        refuse_foreign_writes(folder, RUN_WRITES, f"the replicas of {model}")
        os.makedirs(folder, exist_ok=True)
        resuming = ownership.owns(f"{folder}/checkpoint_last.pt")
        first = specs[group[0]]
        command = self.replica_command(model, group, first.commands["train"])
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
            if self.options.keep_checkpoints != "all":  # the stacked checkpoints serve a resume only
                for name in sorted(os.listdir(folder)):
                    if name.endswith(".pt"):
                        ownership.remove(f"{folder}/{name}")

    def run_pairs(self, prep: Prepared) -> None:
        """Every pair in this process, one after the other."""
        pairs = self.pairs
        for k, (model, seed) in enumerate(pairs, 1):
            self.run_one(model, seed, prep, f"[{k}/{len(pairs)}]")

    def damage_command(self, model: str, seed: int, out: str) -> List[str]:
        """tools/damage.py on the evaluated checkpoint of an lla row (--damage), with the task's Table 2 sentence."""
        return commands.damage(
            self.layout.bin,
            self.checkpoint_path(out, model),
            lla.damage_conditions(self.damage, MODELS[model].adversary),
            seed,
            self.hp,
            lla.damage_examples(self.task.damage_examples, self.layout.bin),
        )

    def run_damage(self, model: str, seed: int, out: str, index: str) -> None:
        checkpoint = self.checkpoint_path(out, model)
        lla.run_damage(self.damage_command(model, seed, out), checkpoint, out, model, seed, index, self.options.force)

    def report(self, seconds: float) -> None:
        """The tables over seeds, printed, and WORK/summary.json (examples/custom prints its own report)."""
        reports.write_report(self, seconds)
