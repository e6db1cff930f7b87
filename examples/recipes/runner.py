"""The recipes' pipeline (Recipe): data preparation, lexicons, fairseq-preprocess, then for each model and seed the
training, decoding and scoring commands, run or reused (finished runs are skipped, unfinished ones resumed)."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import re
import shlex
import sys
import time
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence, Tuple

from lexical_offline.textio import holds, parallel_bytes, write_parallel

from recipes import ROOT, ownership, reports
from recipes.catalogue import (
    AUTHORS_DECODER,
    AUTHORS_GATE,
    AUTHORS_OUTPUTS,
    JOINED_DICT_MODELS,
    LEXICON_METHODS,
    MODELS,
    ModelSpec,
    parse_models,
)
from recipes.console import PROG, RecipeError, hms, say, show
from recipes.execute import RunOutcome, RunSpec, execute_run
from recipes.lla import LEXICON_UNIT_METRIC, LlaSteps
from recipes.rundir import PREPROCESS_WRITES, RUN_WRITES, RunDirectory, lock_work_directory, remove_owned
from recipes.process import child_env, run_concurrently, run_logged, search_options, tool
from recipes.settings import (
    CPU_LSTM_ARCH_SIZES,
    PRESET_LABELS,
    cpu_sized,
    effective_hparams,
    lla_settings,
    parse_seeds,
    transformer_settings,
)
from recipes.steps import Step
from recipes.tasks import Prepared, Task
from recipes.textio import count_entries, read_json, sha1_files, sha1_lexicon_entries, write_json

USER_DIR = os.path.join(ROOT, "fairseq_lexical")  # fairseq's --user-dir
EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where the package recipes lies
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


THREADS_RULE = "as set, else the cores idle at the start"

RESULT_LINE = re.compile(r"\[\d+/\d+\] (seed \d+  .*)")  # run_one's result (or skip) line of a pair


def job_outcome(log: str) -> str:
    """What a --jobs child's log ends with: its error message, else its last result line, else its last line."""
    with open(log, errors="replace") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    errors = [line for line in lines if line.startswith(PROG + ": ")]
    results = [m.group(1) for line in lines if (m := RESULT_LINE.fullmatch(line))]
    return (errors or results or lines or ["(empty log)"])[-1]


def out_of_vocabulary_notes(train, test, threshold: float = 0.05) -> List[str]:
    """Warnings, one per side of the pairs at most, about test tokens that never occur in training: they become
    <unk>, which fairseq reports only in preprocess.log. The recipes print them before preprocessing, and under
    --dry-run too. A side gets one when

    - any test token at all is unseen only because the files differ in Unicode normalisation: unseen as written, seen
      once both are in NFC (training in NFC, testing in NFD: the same words, other code points). However few, they
      are words the model knows and will read as <unk>; normalise both files alike (e.g. to NFC);
    - or more than ``threshold`` (5 %) of its test tokens are unseen even in NFC. The paper's test sets stay below it
      (COGS gen: 1.7 % of the target tokens; English-Chinese: 1.9 % source, 4.4 % target); a test set tokenised or
      cased otherwise than the training set goes above it."""
    import unicodedata

    def share(count: int, total: int) -> str:  # one token in 10,000 is 0.01%, not 0%
        p = 100 * count / total
        return f"{p:.0f}%" if p >= 1 else f"{p:.2g}%"

    notes = []
    for side, name in ((0, "source"), (1, "target")):
        vocab = {w for pair in train for w in pair[side].split()}
        tokens = [w for pair in test for w in pair[side].split()]
        unseen = [w for w in tokens if w not in vocab]
        if not unseen:
            continue
        in_nfc: Dict[str, str] = {}  # NFC form -> a training token of that form
        for w in vocab:
            in_nfc.setdefault(unicodedata.normalize("NFC", w), w)
        renormalised = [w for w in unseen if unicodedata.normalize("NFC", w) in in_nfc]
        if not renormalised and (len(unseen) / len(tokens)) <= threshold:
            continue
        note = (
            f"warning: {share(len(unseen), len(tokens))} of the test {name} tokens never occur in training "
            f"({len(unseen)} of {len(tokens)}; they become <unk>)"
        )
        if renormalised:
            w = renormalised[0]
            note += (
                f"; {share(len(renormalised), len(tokens))} only because the files differ in normalisation: they "
                f"occur once both are in Unicode NFC (e.g. {ascii(w)} in the test file, "
                f"{ascii(in_nfc[unicodedata.normalize('NFC', w)])} in training; NFC against NFD?), normalise them "
                "alike (e.g. to NFC)"
            )
        notes.append(note)
    return notes


def refuse_work_under_a_file(work: str) -> None:
    """--work a/file.txt/sub would fail at its first write, with a traceback: say it now."""
    path = work
    while path != os.path.dirname(path):
        if os.path.exists(path) and not os.path.isdir(path):
            raise RecipeError(f"--work {work}: {path} is a file, not a directory")
        path = os.path.dirname(path)


def stale_runs_error(problems: Sequence[str], note: str = "") -> RecipeError:
    return RecipeError(
        "finished runs, or unfinished ones with a checkpoint, made with other settings (the train/generate/score "
        "commands, data or lexicon differ):\n  "
        + "\n  ".join(problems)
        + "\nuse --force to re-run them, or another --work"
        + note
    )


LLA_NOT_RESUMABLE = "an lla run stopped within the Lexicon Unit epochs: their selection is not in {last}"


class Recipe(LlaSteps):
    """One invocation of a recipe: a task, its settings from the command line, the models and seeds to run."""

    def __init__(self, task: Task, args):
        self.task, self.args = task, args
        self.work = os.path.abspath(args.work or task.default_work(args))
        refuse_work_under_a_file(self.work)
        self.data_dir = self.work + "/data"
        self.bin = self.work + "/bin"
        self.lexdir = self.work + "/lexicons"
        self.hp = effective_hparams(task, args)
        self.lla = lla_settings(args)
        self.models = parse_models(args.models, task)
        self.transformer_models = [m for m in self.models if MODELS[m].transformer]
        self.ts = transformer_settings(args)
        self.bin_joined = self.work + "/bin_joined"  # --joined-dictionary, for pgn
        self.damage = args.damage
        self.lla_models = [m for m in self.models if MODELS[m].lla]
        # a --jobs child runs one model of the parent's, which has checked this
        if self.damage is not None and not self.lla_models and not args.as_job:
            raise RecipeError("--damage applies to the lla models (lla, lla_noadv); none is in --models")
        if args.jobs < 1:
            raise RecipeError(f"--jobs must be >= 1, got {args.jobs}")
        if args.jobs > 1 and not getattr(args, "recipe_argv", None):
            raise RecipeError("--jobs needs the recipe's command line (python -m recipes TASK ...)")
        self.seeds = parse_seeds(args)
        self.settings = args.preset
        self.settings_label = PRESET_LABELS[args.preset]
        if args.lexicon and not os.path.isfile(args.lexicon):
            raise RecipeError(f"--lexicon {args.lexicon}: file not found")
        if args.lexicon and not args.as_job and not any(self.given_lexicon(MODELS[m].lexicon) for m in self.models):
            readers = ", ".join(k for k, spec in MODELS.items() if self.given_lexicon(spec.lexicon))
            raise RecipeError(
                f"--lexicon {args.lexicon}: none of --models ({', '.join(self.models)}) would read it; it replaces "
                f"the lexicon of the Simple rows ({readers})"
            )
        if not os.path.isdir(args.data):
            raise RecipeError(f"--data {args.data}: not a directory")
        self.files = task.locate(os.path.abspath(args.data))
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
        prep = self.task.prepare(self.args, self.files)
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
            with ownership.writing(self.data_dir):
                for name, pairs in splits.items():
                    write_parallel(f"{self.data_dir}/{name}", pairs)  # (a file whose content is the same stays)
        say(
            f"== data: {len(prep.train)} train, "
            + (f"{len(prep.valid)} validation, " if prep.valid is not None else "")
            + f"{len(prep.test)} test pairs from {', '.join(sorted(set(self.files.values())))}"
        )
        for note in prep.notes + out_of_vocabulary_notes(prep.train, prep.test):
            say(f"   {note}")
        self.preprocess(self.bin, self.preprocess_command(self.bin), "preprocess.log")
        if any(m in JOINED_DICT_MODELS for m in self.models):
            self.preprocess(self.bin_joined, self.preprocess_command(self.bin_joined), "preprocess_joined.log")

    def data_written(self, name: str, pairs) -> bool:
        """Whether WORK/data/NAME.src and .tgt hold ``pairs`` already."""
        src, tgt = parallel_bytes(pairs)
        return holds(f"{self.data_dir}/{name}.src", src) and holds(f"{self.data_dir}/{name}.tgt", tgt)

    def planned_writes(self) -> List[str]:
        """The files outside the run directories this invocation may write (the data-bins' are checked by name)."""
        w = self.work
        paths = [f"{w}/config.json", f"{w}/summary.json", f"{w}/preprocess.log", f"{w}/preprocess_joined.log"]
        paths += [
            f"{self.data_dir}/{n}.{ext}" for n in ("train", "valid", "test", "lexcorpus") for ext in ("src", "tgt")
        ]
        for method in self.lexicon_methods():
            if not self.given_lexicon(method):
                paths += [f"{self.lexdir}/{method}.{ext}" for ext in ("tsv", "log", "json")]
        if self.args.jobs > 1 and len(self.pairs) > 1:
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
        for destdir in (self.bin, self.bin_joined):
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
        if self.args.force:
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

    def preprocess_command(self, destdir: str) -> List[str]:
        cmd = [
            tool("fairseq-preprocess"),
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            self.data_dir + "/train",
            "--validpref",
            self.data_dir + "/valid",
            "--testpref",
            self.data_dir + "/test",
            "--destdir",
            destdir,
            "--workers",
            "1",
        ]
        return cmd + (["--joined-dictionary"] if destdir == self.bin_joined else [])

    def preprocess(self, destdir: str, cmd: List[str], log: str) -> None:
        step = Step(
            "fairseq-preprocess",
            destdir + "/prepared.json",
            {"data_sha1": self.data_sha1, "command": show(cmd)},
            [f"{destdir}/dict.{side}.txt" for side in ("src", "tgt")],
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
        return self.bin_joined if model in JOINED_DICT_MODELS else self.bin

    # -- lexicons -----------------------------------------------------------------------------------------------
    def lexicon_path(self, method: str) -> str:
        if self.given_lexicon(method):
            return os.path.abspath(self.args.lexicon)
        return f"{self.lexdir}/{method}.tsv"

    def lexicon_command(self, method: str, data_dir: str = "", lexdir: str = "") -> List[str]:
        """build_lexicon.py for ``method`` from WORK/data's lexicon corpus into WORK/lexicons (or the given folders:
        check_before_writing builds one aside)."""
        opts, _ = LEXICON_METHODS[method]
        data_dir, lexdir = data_dir or self.data_dir, lexdir or self.lexdir
        return [
            sys.executable,
            os.path.join(ROOT, "tools", "build_lexicon.py"),
            *opts,
            *self.task.lexicon_build_args,
            "--src",
            data_dir + "/lexcorpus.src",
            "--tgt",
            data_dir + "/lexcorpus.tgt",
            "-o",
            f"{lexdir}/{method}.tsv",
            "--no-progress",
        ]

    def lexicon_step(self, method: str) -> Step:
        cmd = self.lexicon_command(method)
        key = {"data_sha1": self.data_sha1, "command": show(cmd[1:])}
        log = f"{self.lexdir}/{method}.log"
        return Step(f"build_lexicon.py --method {method}", f"{self.lexdir}/{method}.json", key, [cmd[-2]], log)

    def lexicon_to_be_built(self, method: str, prep: Prepared) -> Optional[str]:
        """The SHA-1 (sha1_lexicon_entries) of the lexicon this invocation would build, where it would replace the
        one that finished or checkpointed runs were made with (built aside, in a temporary folder), else None."""
        import tempfile

        if self.args.force or self.given_lexicon(method) or self.lexicon_step(method).up_to_date():
            return None
        if not any(
            MODELS[m].lexicon == method and RunDirectory(self.run_dir(m, s), {}, "", "").has_results()
            for m, s in self.pairs
        ):
            return None
        with tempfile.TemporaryDirectory(prefix="lexicon-check-") as tmp:
            write_parallel(f"{tmp}/lexcorpus", prep.lexcorpus)
            cmd = self.lexicon_command(method, tmp, tmp)
            run_logged(cmd, f"{tmp}/{method}.log", what=f"build_lexicon.py --method {method}")
            return sha1_lexicon_entries(cmd[-2])

    def lexicon_methods(self) -> List[str]:
        """The lexicon methods the models read, each once, in the models' order."""
        return list(dict.fromkeys(MODELS[m].lexicon for m in self.models if MODELS[m].lexicon in LEXICON_METHODS))

    def given_lexicon(self, method: str) -> bool:
        """Whether the method's lexicon is the user's file (--lexicon replaces the Simple rows' lexicon)."""
        return method == "simple" and bool(self.args.lexicon)

    def build_lexicons(self) -> None:
        for method in self.lexicon_methods():
            path = self.lexicon_path(method)
            desc = LEXICON_METHODS[method][1]
            if self.given_lexicon(method):
                say(f"== lexicon (given with --lexicon): {count_entries(path)} entries in {path}")
                continue
            step, cmd = self.lexicon_step(method), self.lexicon_command(method)
            # a --jobs child's --force re-runs its pair only: the parent has rebuilt the lexicons its siblings use
            force = self.args.force and not self.args.as_job
            secs = None
            if force or not step.up_to_date():
                with ownership.writing(self.lexdir):
                    secs = step.run(lambda: run_logged(cmd, step.log, what=step.name), force)
            done = "up to date" if secs is None else hms(secs)
            say(f"== lexicon ({desc}): {count_entries(path)} entries in {path} ({done})")
        self.lexicon_sha1_aside = {}  # built now: the fingerprints read the files

    # -- one (model, seed) ---------------------------------------------------------------------------------------
    def arch(self, spec: ModelSpec) -> str:
        if not cpu_sized(self.args):
            return spec.arch
        if spec.small_arch or spec.lla:  # the Transformer and LLA rows have one CPU size
            return spec.small_arch or spec.arch + "_small"
        return f"{spec.arch}_{CPU_LSTM_ARCH_SIZES[self.hp.hidden]}"

    def label(self, model: str) -> str:
        spec = MODELS[model]
        label = spec.label
        if self.given_lexicon(spec.lexicon):  # the row reads the user's file, not a Simple lexicon
            label = label.replace("Simple", f"{os.path.basename(self.args.lexicon)} (--lexicon)", 1)
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
        out += list(spec.small_extra if cpu_sized(self.args) and spec.transformer else spec.extra)
        if spec.transformer:  # no extra p_write dropout: the R-Dangle paper's models have none
            pass
        elif spec.lla:
            out += ["--lexicon-unit-epochs", str(self.lla.lexicon_epochs)]
        elif self.hp.write_dropout and (self.hp.write_dropout_models == "all" or spec.lexical):
            out += ["--write-dropout", str(self.hp.write_dropout)]
        if self.hp.decoder == "authors" and not (spec.transformer or spec.lla):
            out += list(AUTHORS_DECODER) + (list(AUTHORS_GATE + AUTHORS_OUTPUTS) if spec.lexical else [])
        return out

    def fairseq_train(
        self,
        model: str,
        seed: int,
        out: str,
        optimisation: Sequence[str],
        batching: Sequence[str],
        schedule: Sequence[str],
        criterion: Sequence[str] = (),
        after: Sequence[str] = (),
    ) -> List[str]:
        """The one fairseq-train command of every row (LSTM, Transformer, LLA): the model and its data,
        lexical_cross_entropy with `criterion` options, Adam with the row's `optimisation` options, `batching`, the
        length of training (`schedule`), checkpoints and logs in OUT, then `after` (validation, saving) and
        --train-args."""
        return [
            tool("fairseq-train"),
            self.bin_for(model),
            "--user-dir",
            USER_DIR,
            *self.model_args(model),
            "--criterion",
            "lexical_cross_entropy",
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
            out,
            "--no-epoch-checkpoints",
            *LOG_FORMAT.split(),
            "--log-interval",
            str(self.hp.log_interval),
            "--num-workers",
            "0",
            *after,
            *shlex.split(self.args.train_args),
        ]

    def train_command(self, model: str, seed: int, out: str) -> List[str]:
        """An LSTM row (HParams: appendix C.1's inverse-sqrt schedule) or a Transformer row (TransformerSettings:
        fairseq's transformer_iwslt_de_en recipe); validation, patience and the evaluated checkpoint are the task's
        for both. The lla rows have their own (LlaSteps.lla_train_command)."""
        if MODELS[model].transformer:
            ts = self.ts
            criterion = ["--label-smoothing", f"{ts.label_smoothing:g}"] + (
                ["--sentence-avg"] if ts.sentence_avg else []
            )
            optimisation = [
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
            ]
            batching = (
                (["--max-tokens", str(ts.max_tokens)] if ts.max_tokens else [])
                + (["--batch-size", str(ts.batch_size)] if ts.batch_size else [])
                + ["--update-freq", str(ts.update_freq)]
            )
            max_update = ts.max_update
        else:
            hp = self.hp
            criterion = ["--sentence-avg"] if hp.sentence_avg else []
            optimisation = (["--adam-betas", hp.adam_betas] if hp.adam_betas else []) + [
                "--lr",
                f"{hp.lr:.6g}",
                "--lr-scheduler",
                "inverse_sqrt",
                "--warmup-updates",
                str(hp.warmup),
                "--clip-norm",
                str(hp.clip_norm),
            ]
            batching = ["--batch-size", str(hp.batch_size), "--update-freq", str(hp.update_freq)]
            max_update = hp.max_update
        return self.fairseq_train(
            model,
            seed,
            out,
            optimisation,
            batching,
            ["--max-update", str(max_update)],
            criterion=criterion,
            after=self.validation_args(model),
        )

    def validation_args(self, model: str) -> List[str]:
        """Validation every HParams.validate_every updates, a checkpoint at each, early stopping after the task's
        patience; without validation (Colors) a checkpoint every RESUME_SAVE_EVERY updates."""
        hp = self.hp
        if hp.validate_every is None:
            return list(RESUME_SAVE)
        cmd = [
            "--validate-interval",
            "100000",
            "--validate-interval-updates",
            str(hp.validate_every),
            "--save-interval",
            "100000",
            "--save-interval-updates",
            str(hp.validate_every),
            "--keep-interval-updates",
            "1",
        ]
        patience = self.task.patience_for(model, hp)
        if patience:
            cmd += ["--patience", str(patience)]
        return cmd

    def checkpoint_path(self, out: str, model: Optional[str] = None) -> str:
        """The evaluated checkpoint: HParams.checkpoint's; the lla rows' is --lla-checkpoint's."""
        if model is not None and MODELS[model].lla:
            return f"{out}/{self.lla_checkpoint_name()}"
        return f"{out}/checkpoint_{self.hp.checkpoint}.pt"

    def generate_command(self, out: str, model: Optional[str] = None) -> List[str]:
        hp = self.hp
        return [
            tool("fairseq-generate"),
            self.bin_for(model) if model else self.bin,
            "--user-dir",
            USER_DIR,
            "--path",
            self.checkpoint_path(out, model),
            "--gen-subset",
            "test",
            "--beam",
            str(hp.beam),
            "--batch-size",
            str(hp.gen_batch_size),
            "--max-len-a",
            "0",
            "--max-len-b",
            str(hp.max_len_b),
            "--num-workers",
            "0",
            *search_options(hp.beam),
            *shlex.split(self.args.generate_args),
        ]

    def score_command(self, out: str, prep_score_args: Sequence[str]) -> List[str]:
        args = [
            a.replace("TRAIN_SRC", self.data_dir + "/train.src").replace("TEST_SRC", self.data_dir + "/test.src")
            for a in prep_score_args
        ]
        return [
            sys.executable,
            os.path.join(ROOT, "tools", "score.py"),
            f"{out}/generate.txt",
            "--reference",
            self.data_dir + "/test.tgt",
            *args,
            "--json",
        ]

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
        if MODELS[model].lla:  # one training call (lla_translation); Thrush's precision, recall and token accuracy
            return {
                "train": self.lla_train_command(model, seed, out),
                "generate": self.generate_command(out, model),
                "score": self.score_command(out, [*prep.score_args, "--thrush"]),
            }
        return {
            "train": self.train_command(model, seed, out),
            "generate": self.generate_command(out, model),
            "score": self.score_command(out, prep.score_args),
        }

    # -- damage (Thrush 2020, Table 2) ---------------------------------------------------------------------------
    def damage_conditions(self, model: str) -> List[str]:
        spec = MODELS[model]
        conds = (
            [c.strip() for c in self.damage.split(",") if c.strip()]
            if self.damage != "auto"
            else ["none", "lstm", "lexicon", "adversary"]
        )
        # the adversary group exists only in the model with an adversary
        return [c for c in conds if spec.adversary or "adversary" not in c.split("+")]

    def damage_command(self, model: str, seed: int, out: str) -> List[str]:
        hp = self.hp
        return [
            sys.executable,
            os.path.join(ROOT, "tools", "damage.py"),
            self.bin,
            "--path",
            self.checkpoint_path(out, model),
            "--damage",
            ",".join(self.damage_conditions(model)),
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
            *[a for e in self.damage_examples() for a in ("--example", e)],
            "--json",
        ]

    def damage_examples(self) -> List[str]:
        """The task's Table 2 sentence(s) whose words are all in the source dictionary (damage.py refuses others)."""
        path = self.bin + "/dict.src.txt"
        if not os.path.isfile(path):
            return list(self.task.damage_examples)
        with open(path, encoding="utf-8") as f:
            vocab = {line.split()[0] for line in f if line.strip()}
        return [e for e in self.task.damage_examples if all(w in vocab for w in e.split())]

    def run_damage(self, model: str, seed: int, out: str, index: str) -> None:
        """tools/damage.py on the evaluated checkpoint: OUT/damage.json (its JSON, the command and the time)."""
        with ownership.writing(out):
            self._run_damage(model, seed, out, index)

    def _run_damage(self, model: str, seed: int, out: str, index: str) -> None:
        cmd = self.damage_command(model, seed, out)
        path = f"{out}/damage.json"
        if os.path.isfile(path) and not self.args.force and read_json(path).get("command") == show(cmd):
            return
        ckpt = self.checkpoint_path(out, model)
        if not os.path.isfile(ckpt):
            say(
                f"{index} {self.pair_name(model, seed)}: no {ckpt} to damage (removed by --keep-checkpoints none?); "
                "skipped"
            )
            return
        secs = run_logged(cmd, path + ".tmp", f"{out}/damage.log", what=f"damage.py ({model}, seed {seed})")
        result = read_json(path + ".tmp")
        ownership.remove(path + ".tmp")
        for r in result["results"]:
            r.get("damage", {}).pop("parameters", None)  # the per-parameter list stays in damage.log's run only
        write_json(path, {"command": show(cmd), "seconds": round(secs, 1), **result})
        say(
            f"{index} seed {seed}  {model}  damage: "
            + "; ".join(
                f"{r['condition']} exact {r['scores']['exact_match']:.2f} prec {100 * r['scores']['precision']:.1f}"
                for r in result["results"]
            )
            + f"  ({hms(secs)})"
        )

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
            **({"transformer": asdict(self.ts)} if spec.transformer else {}),
            "patience": self.task.patience_for(model, self.hp) if self.hp.validate_every else None,
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
            training=f", {self.lla.describe()}" if spec.lla else f" ({self.hp.max_update} updates max)",
            progress=f"{index}    {pair}: ",
            decode_jobs=self.args.decode_jobs,
            keep_checkpoints=self.args.keep_checkpoints,
            run_fields={"settings": self.settings},
            # an lla run stopped within the Lexicon Unit epochs cannot resume (LlaSteps.lla_resumable)
            **(dict(resumable=self.lla_resumable, why_not=LLA_NOT_RESUMABLE) if spec.lla else {}),
            equivalent=earlier,
            force=self.args.force,
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

    def with_lla_selection(self, model: str, seed: int, index: str, training: Dict[str, object]) -> Dict[str, object]:
        """The training summary of an lla run evaluated at checkpoint_best.pt, with what lla_translation selected
        (its lla_selection.json; also written to selection.json): the update count of the summary is the whole
        run's (to the last epoch or the early stop), the evaluated model is checkpoint_best.pt's."""
        out, pair = self.run_dir(model, seed), self.pair_name(model, seed)
        selection = self.lla_selection(out)
        write_json(f"{out}/selection.json", selection)
        unit = selection["lexicon_unit"]
        say(
            f"{index}    {pair}: Lexicon Unit of epoch {unit['epoch']} (lowest validation BCE, "
            f"{unit[LEXICON_UNIT_METRIC]:g}); best validation {selection['metric']} "
            f"{selection[selection['metric']]:g} first at epoch {selection['epoch']}"
        )
        where = f"epoch {selection['epoch']}"
        training = dict(training)
        if selection["epoch"] < selection["last_epoch"]:
            training["selected_updates"] = selection["updates"]
            where += f" (update {training['selected_updates']})"
        training["text"] += f"; {where} of {selection['last_epoch']} evaluated"
        training["selected_epoch"] = selection["epoch"]
        return training

    def run_one(self, model: str, seed: int, prep: Prepared, index: str) -> Optional[dict]:
        run = self.spec(model, seed, prep, index)
        damage = self.damage is not None and MODELS[model].lla

        def after_run(outcome: RunOutcome) -> Optional[dict]:
            if not damage:
                return None
            t0 = time.time()
            self.run_damage(model, seed, run.out, index)
            return {"damage_s": round(time.time() - t0, 1)}

        lla_best = MODELS[model].lla and self.lla.checkpoint == "best"
        outcome = execute_run(
            run,
            after_training=(lambda training: self.with_lla_selection(model, seed, index, training))
            if lla_best
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
        args = self.args
        return {
            "task": self.task.name,
            "split": getattr(args, "split", None),
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
        hp = self.hp
        say(
            f"== {self.task.name}{' ' + self.args.split if self.task.name == 'scan' else ''}: work directory "
            f"{self.work}"
        )
        say(f"== settings: {self.settings_label}")
        # the Akyurek & Andreas line only where such rows run: the Transformer and LLA rows have settings of their own
        lstm_models = [m for m in self.models if m not in self.transformer_models and m not in self.lla_models]
        evaluation = (
            f"validation every {hp.validate_every} updates, " if hp.validate_every else "no validation, "
        ) + f"checkpoint_{hp.checkpoint}.pt, beam {hp.beam}"
        if lstm_models:
            say(
                f"== {', '.join(lstm_models)}: {hp.hidden}-unit 2-layer LSTM, batch {hp.batch_size} x "
                f"{hp.update_freq}, lr {hp.lr:.3g} (inverse sqrt, {hp.warmup} warm-up), clip {hp.clip_norm}, "
                f"{hp.max_update} updates, {evaluation}; "
                + ("the authors' released decoder" if hp.decoder == "authors" else "fairseq's LSTM decoder, eq. 6 gate")
            )
        if self.transformer_models:
            ts = self.ts
            batch = " + ".join(
                x
                for x in (
                    f"--max-tokens {ts.max_tokens}" if ts.max_tokens else "",
                    f"--batch-size {ts.batch_size}" if ts.batch_size else "",
                )
                if x
            )
            tag = (
                f" [{self.args.preset.upper()}: _tiny archs, not the paper's sizes]"
                if cpu_sized(self.args)
                else " [sizes: transformer_iwslt_de_en as the R-Dangle paper; optimiser: fairseq's iwslt recipe, "
                "max_update our choice (the paper gives none)]"
            )
            say(
                f"== {', '.join(self.transformer_models)}: Adam {ts.adam_betas}, lr {ts.lr:g} (inverse sqrt, "
                f"{ts.warmup} warm-up), weight decay {ts.weight_decay:g}, label smoothing {ts.label_smoothing:g}, "
                f"clip {ts.clip_norm:g}, {batch} x {ts.update_freq}, {ts.max_update} updates, {evaluation}{tag}"
            )
        if self.lla_models:
            say(
                f"== {', '.join(self.lla_models)} (Thrush 2020, --arch {self.arch(MODELS['lla'])}): "
                f"{self.lla.describe()} (one fairseq-train call, --task lla_translation; evaluated: "
                f"{self.lla_checkpoint_name()}); beam {hp.beam}; "
                f"scored with exact match and Thrush's precision/recall/token accuracy"
                + ("; --damage " + self.damage if self.damage is not None else "")
            )
        say(f"== models: {', '.join(self.models)}; seeds: {', '.join(map(str, self.seeds))}")
        self.check_extra_options()
        if self.args.dry_run:
            # the tasks' prepare only reads (prepare() writes): the data's warnings, as a real run gives them
            prep = self.task.prepare(self.args, self.files)
            for note in out_of_vocabulary_notes(prep.train, prep.test):
                say(note)
            say(
                "== dry run: data files found ("
                + ", ".join(f"{k}: {v}" for k, v in self.files.items())
                + "); the commands would be:"
            )
            say(f"   fairseq-preprocess: {show(self.preprocess_command(self.bin))}")
            if any(m in JOINED_DICT_MODELS for m in self.models):
                say(
                    f"   fairseq-preprocess (joined dictionary, for {', '.join(JOINED_DICT_MODELS)}): "
                    f"{show(self.preprocess_command(self.bin_joined))}"
                )
            say(
                "   lexicons: "
                + "; ".join(
                    f"given with --lexicon: {self.lexicon_path(m)} (not built)"
                    if self.given_lexicon(m)
                    else show(self.lexicon_command(m))
                    for m in self.lexicon_methods()
                )
            )
            for (model, seed), run in self.planned_runs().items():
                say(f"{run.who}:")
                for k, cmd in run.commands.items():
                    say(f"   {k}: {show(cmd)}")
                if self.damage is not None and MODELS[model].lla:
                    say(f"   damage: {show(self.damage_command(model, seed, run.out))}")
            if self.args.jobs > 1 and len(self.pairs) > 1:
                total = len(self.pairs)
                say(
                    f"== --jobs {self.args.jobs}: up to {min(self.args.jobs, total)} of these {total} (model, seed) "
                    f"pairs would run at a time, each as its own recipe process (log: "
                    f"{self.work}/jobs/<model>_seed<N>.log)"
                )
            return 0
        prep = self.prepared_pairs()
        self.check_before_writing(prep)  # a refusal leaves WORK as it was
        os.makedirs(self.work, exist_ok=True)
        if not self.args.as_job:  # --jobs children and campaign runs work under their parent's lock
            self._lock = lock_work_directory(self.work)
            self.check_before_writing(prep, build_aside=False)  # unchanged since, now that no other recipe can
            # a WORK of an earlier version: its files are recorded by their names, as it saw them
            ownership.adopt(
                [self.data_dir, self.bin, self.bin_joined, self.lexdir, self.work + "/jobs"]
                + self.report_dirs()
                + [self.run_dir(m, s) for m, s in self.pairs]
                + [self.work]
            )
            with ownership.writing(self.work):  # the parent's config.json holds the whole invocation
                write_json(self.work + "/config.json", self.config())
        self.write_data(prep)
        self.build_lexicons()
        if self.args.prepare_only:
            say(f"== prepared (--prepare-only): {self.work}; no model trained")
            return 0
        if self.args.jobs > 1 and len(self.pairs) > 1:  # one pair: in this process
            failed = self.run_jobs()
        else:
            failed = []
            if not self.args.as_job:
                say(f"== {child_env()['OMP_NUM_THREADS']} CPU thread(s) per program (OMP_NUM_THREADS: {THREADS_RULE})")
            self.run_pairs(prep)
        if not self.args.as_job:  # the parent reports over every pair
            with ownership.writing(self.work):
                self.report(time.time() - t0)
        if failed:
            raise RecipeError(
                f"{len(failed)} of {len(self.pairs)} (model, seed) pairs failed "
                "(the table above is over the others):\n  " + "\n  ".join(failed)
            )
        return 0

    def check_extra_options(self) -> None:
        """--train-args and --generate-args, parsed by fairseq's own parsers against each model's real commands
        (its task and architecture), before anything runs or is written: a mistyped option must not wait for the
        first model's training to end."""
        if not (self.args.train_args.strip() or self.args.generate_args.strip()):
            return
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):  # fairseq's import-time notices
            from fairseq import options

        prep = Prepared([], None, [], [], {}, score_args=[])
        for model in self.models:
            commands = self.commands(model, self.seeds[0], self.run_dir(model, self.seeds[0]), prep)
            for step, parser, given in (
                ("train", options.get_training_parser, self.args.train_args),
                ("generate", options.get_generation_parser, self.args.generate_args),
            ):
                if not given.strip():
                    continue
                err = io.StringIO()
                try:
                    with contextlib.redirect_stderr(err):
                        options.parse_args_and_arch(parser(), input_args=[str(c) for c in commands[step][1:]])
                except SystemExit:
                    why = (err.getvalue().strip().splitlines() or ["rejected"])[-1].split("error: ", 1)[-1]
                    option = "--train-args" if step == "train" else "--generate-args"
                    raise RecipeError(f"{option} {given!r}: fairseq-{step} ({model}) says: {why}") from None

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
        prep = Prepared([], None, [], [], {}, score_args=self.task.prepare(self.args, self.files).score_args)
        pairs = self.pairs
        return {(m, s): self.spec(m, s, prep, f"[{k}/{len(pairs)}]") for k, (m, s) in enumerate(pairs, 1)}

    def run_pairs(self, prep: Prepared) -> None:
        """Every pair in this process, one after the other."""
        pairs = self.pairs
        for k, (model, seed) in enumerate(pairs, 1):
            self.run_one(model, seed, prep, f"[{k}/{len(pairs)}]")

    def job_command(self, model: str, seed: int) -> List[str]:
        """The recipe's own command line for one (model, seed): argparse keeps the last of a repeated option."""
        return [
            sys.executable,
            "-m",
            "recipes",
            *self.args.recipe_argv,
            "--work",
            self.work,
            "--models",
            model,
            "--seed-list",
            str(seed),
            "--jobs",
            "1",
            "--as-job",
        ]

    def run_jobs(self) -> List[str]:
        """Every (model, seed) as a child recipe process, --jobs at once (process.run_concurrently); finished pairs
        too (the child skips them, or damages them with --damage). Returns the failed ones, with their logs."""
        pairs = self.pairs
        jobs_dir = self.work + "/jobs"  # not in the run directory: the child may delete and recreate that
        logs = [f"{jobs_dir}/{model}_seed{seed}.log" for model, seed in pairs]
        env = child_env(self.args.jobs)
        # the children import this very package (and lexical_offline from the checkout) whatever started us
        env["PYTHONPATH"] = os.pathsep.join(p for p in (EXAMPLES, ROOT, env.get("PYTHONPATH")) if p)
        started: Dict[int, float] = {}
        failed: List[str] = []
        label = [self.pair_name(model, seed) for model, seed in pairs]
        name = [f"[{k}/{len(pairs)}] {text}" for k, text in enumerate(label, 1)]
        threads = f", OMP_NUM_THREADS={env['OMP_NUM_THREADS']}" if "OMP_NUM_THREADS" in env else ""
        say(f"== {len(pairs)} (model, seed) pairs, {self.args.jobs} at a time{threads}; their logs: {jobs_dir}/")

        def on_start(i: int) -> None:
            started[i] = time.time()
            say(f"{name[i]}: started (log {logs[i]})")

        def on_end(i: int, code: int) -> None:
            status = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
            if code != 0:
                failed.append(f"{label[i]} ({status}): {logs[i]}")
            say(
                f"{name[i]}: {'ended' if code == 0 else 'FAILED'} ({status}, {hms(time.time() - started[i])}): "
                f"{job_outcome(logs[i])}"
            )

        def on_progress(running: List[int], done: List[int], waiting: List[int]) -> None:
            say(
                f"== jobs: {len(running)} running ({', '.join(label[i] for i in running)}), "
                f"{len(done)} done ({len(failed)} failed), {len(waiting)} waiting"
            )

        with ownership.writing(jobs_dir):
            run_concurrently(
                [self.job_command(m, s) for m, s in pairs],
                logs,
                self.args.jobs,
                env=env,
                on_start=on_start,
                on_end=on_end,
                on_progress=on_progress,
            )
        return failed

    def report(self, seconds: float) -> None:
        """The tables over seeds, printed, and WORK/summary.json (examples/custom prints its own report)."""
        reports.write_report(self, seconds)
