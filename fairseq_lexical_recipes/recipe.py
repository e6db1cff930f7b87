"""A recipe as a planner (Recipe): the checked, frozen options of one invocation (invocation.Invocation) turned into
the commands of its steps (fairseq_lexical_recipes.commands) and its runs as data (Plan: each (model, seed) an
execute.RunSpec). Planning writes nothing and reads no more than the lexicons and the source dictionary where they
exist (a run's fingerprint, damage.py's example sentence). runner.Runner runs a plan; reports.py and jobs.py read
it; examples/compositional_split and examples/scan/width_proxy.py take their commands from a Recipe."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_lexical_recipes import ROOT, commands, lla
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS, ModelSpec
from fairseq_lexical_recipes.commands import LOG_FORMAT, RESUME_SAVE
from fairseq_lexical_recipes.console import pair_name, show
from fairseq_lexical_recipes.execute import RunSpec
from fairseq_lexical_recipes.invocation import Invocation, check_options, given_lexicon
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.process import cuda_visible
from fairseq_lexical_recipes.settings import arch_size
from fairseq_lexical_recipes.tasks import Task
from fairseq_lexical_recipes.textio import sha1_files, sha1_lexicon_entries


@dataclass(frozen=True)
class Inputs:
    """What the runs take from the prepared data: the task's tools/score.py options, the SHA-1 of the data and of
    the lexicons built aside before writing (runner.Runner.check_before_writing; the others are read from their
    files). The defaults: nothing prepared yet."""

    score_args: Tuple[str, ...] = ()
    data_sha1: str = ""
    lexicon_sha1: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """An invocation's runs as data: what runner.Runner executes, and the report (reports.Report) and --jobs
    (jobs.run_jobs) read."""

    invocation: Invocation
    runs: Mapping[Tuple[str, int], RunSpec]  # (model, seed) -> its run, in the order they run
    labels: Mapping[str, str]  # model -> its label in tables and config.json
    lexicons: Mapping[str, str]  # lexicon method -> the file the rows read (built, or --lexicon's)


class Recipe:
    """One invocation of a recipe: a task with its own options and the invocation's options (RecipeOptions: the
    command line's, or given by a program), checked (invocation.check_options) and planned. ``settings``: the name
    and label of a preset that is not the recipes' (examples/custom's)."""

    def __init__(self, task: Task, options: RecipeOptions, settings: Optional[Tuple[str, str]] = None):
        self.invocation = check_options(task, options, settings)

    # -- where WORK keeps a run's files ---------------------------------------------------------------------------
    def run_dir(self, model: str, seed: object) -> str:
        """WORK/<model>/seed<N>: the pair's save directory, config.json, logs and score.json."""
        return f"{self.invocation.work}/{model}/seed{seed}"

    def bin_for(self, model: str) -> str:
        """The data-bin of a model: WORK/bin_joined (--joined-dictionary) for pgn, else WORK/bin."""
        return self.invocation.layout.bin_of(MODELS[model].joined_dictionary)

    def preprocess_command(self, joined: bool) -> List[str]:
        layout = self.invocation.layout
        prefixes = {split: f"{layout.data}/{split}" for split in ("train", "valid", "test")}
        return commands.preprocess(prefixes, layout.bin_of(joined), joined=joined)

    # -- lexicons --------------------------------------------------------------------------------------------------
    def lexicon_methods(self) -> List[str]:
        """The lexicon methods the models read, each once, in the models' order."""
        lexicons = [MODELS[m].lexicon for m in self.invocation.models]
        return list(dict.fromkeys(method for method in lexicons if method in LEXICON_METHODS))

    def given_lexicon(self, method: Optional[str]) -> bool:
        """Whether the method's lexicon is the user's file (--lexicon replaces the Simple rows' lexicon)."""
        return given_lexicon(method, self.invocation.options)

    def lexicon_path(self, method: str) -> str:
        if self.given_lexicon(method):
            return os.path.abspath(self.invocation.options.lexicon)
        return f"{self.invocation.layout.lexicons}/{method}.tsv"

    def lexicon_command(self, method: str, data_dir: str = "", lexdir: str = "") -> List[str]:
        """build_lexicon.py for ``method`` from WORK/data's lexicon corpus into WORK/lexicons (or the given folders:
        the runner builds one aside before writing)."""
        layout = self.invocation.layout
        data_dir, lexdir = data_dir or layout.data, lexdir or layout.lexicons
        options = [*LEXICON_METHODS[method][0], *self.invocation.task.lexicon_build_args]
        return commands.build_lexicon(
            options, data_dir + "/lexcorpus.src", data_dir + "/lexcorpus.tgt", f"{lexdir}/{method}.tsv"
        )

    # -- one row -----------------------------------------------------------------------------------------------------
    def arch(self, spec: ModelSpec) -> str:
        inv = self.invocation
        return spec.family.arch(spec.arch, arch_size(inv.options.preset, inv.hp.hidden))

    def label(self, model: str) -> str:
        spec, options = MODELS[model], self.invocation.options
        label = spec.label
        if self.given_lexicon(spec.lexicon):  # the row reads the user's file, not a Simple lexicon
            label = label.replace("Simple", f"{os.path.basename(options.lexicon)} (--lexicon)", 1)
        return f"{label} (--arch {self.arch(spec)})"

    def model_args(self, model: str) -> List[str]:
        """The row's model options: its arch, lexicon and own options, and what its family adds."""
        spec, inv = MODELS[model], self.invocation
        out = ["--arch", self.arch(spec)]
        if spec.lexicon in LEXICON_METHODS:
            out += ["--lexicon", self.lexicon_path(spec.lexicon)]
            if inv.hp.lexicon_top_k and "--lexicon-temperature" not in spec.extra:
                out += ["--lexicon-top-k", str(inv.hp.lexicon_top_k)]
        elif spec.lexicon is not None:
            out += ["--lexicon", spec.lexicon]
        out += spec.family.row_options(spec.extra, arch_size(inv.options.preset, inv.hp.hidden))
        return out + spec.family.added_options(spec, inv.hp, inv.lla)

    def train_command(self, model: str, seed: int, out: str) -> List[str]:
        """commands.fairseq_train of the row: its data-bin and model options, its log interval, --train-args, and
        its family's training (an LSTM row: HParams, appendix C.1's inverse-sqrt schedule; a Transformer row:
        TransformerSettings, fairseq's transformer_iwslt_de_en recipe; validation, patience and the evaluated
        checkpoint the task's for both; an lla row: Thrush's schedule, lla.training)."""
        inv = self.invocation
        return commands.fairseq_train(
            self.bin_for(model),
            self.model_args(model),
            seed,
            out,
            log_interval=inv.hp.log_interval,
            extra=inv.options.train_args,
            **MODELS[model].family.training(inv, self.patience(model)),
        )

    def patience(self, model: str) -> Optional[int]:
        """Early stopping after this many validations without a better loss: the task's rule for the row."""
        inv = self.invocation
        return inv.task.patience_for(model, inv.hp, inv.options.patience is not None)

    def checkpoint_path(self, out: str, model: str) -> str:
        """The evaluated checkpoint: the family's (HParams.checkpoint's; the lla rows' is --lla-checkpoint's)."""
        return f"{out}/{MODELS[model].family.evaluated_checkpoint(self.invocation.hp, self.invocation.lla)}"

    def generate_command(self, out: str, model: str) -> List[str]:
        hp = self.invocation.hp
        return commands.fairseq_generate(
            self.bin_for(model),
            self.checkpoint_path(out, model),
            hp.beam,
            hp.gen_batch_size,
            hp.max_len_b,
            extra=self.invocation.options.generate_args,
        )

    def score_command(self, out: str, score_args: Sequence[str]) -> List[str]:
        d = self.invocation.layout.data
        options = [a.replace("TRAIN_SRC", d + "/train.src").replace("TEST_SRC", d + "/test.src") for a in score_args]
        return commands.score(f"{out}/generate.txt", d + "/test.tgt", options)

    def commands(self, model: str, seed: int, out: str, score_args: Sequence[str] = ()) -> Dict[str, List[str]]:
        """The run's train, generate and score commands (``score_args``: the task's tools/score.py options)."""
        return {
            "train": self.train_command(model, seed, out),
            "generate": self.generate_command(out, model),
            "score": self.score_command(out, [*score_args, *MODELS[model].family.score_options]),
        }

    def damage_command(self, model: str, seed: int, out: str) -> List[str]:
        """tools/damage.py on the evaluated checkpoint of an lla row (--damage), with the task's Table 2 sentence."""
        inv = self.invocation
        return commands.damage(
            inv.layout.bin,
            self.checkpoint_path(out, model),
            lla.damage_conditions(inv.damage, MODELS[model].adversary),
            seed,
            inv.hp,
            lla.damage_examples(inv.task.damage_examples, inv.layout.bin),
        )

    # -- the runs ----------------------------------------------------------------------------------------------------
    def fingerprint(self, model: str, commands: Mapping[str, List[str]], inputs: Inputs) -> Dict[str, object]:
        """What a finished run must agree on to be reused: the commands (work directory abstracted), the data and
        the lexicon's content."""

        def norm(cmd):
            return (
                show(cmd)
                .replace(self.invocation.work, "$WORK")
                .replace(sys.executable, "python")
                .replace(ROOT, "$REPO")
                .replace(show(RESUME_SAVE), show(RESUME_SAVE[:3]))  # saving more often changes no result
                .replace(LOG_FORMAT, "--log-format simple")
            )  # nor does the log format (runs made before json)

        method = MODELS[model].lexicon
        lex_sha1 = inputs.lexicon_sha1.get(method)
        if lex_sha1 is None and method in LEXICON_METHODS and os.path.isfile(self.lexicon_path(method)):
            lex_sha1 = sha1_lexicon_entries(self.lexicon_path(method))
        return {"data_sha1": inputs.data_sha1, "lexicon_sha1": lex_sha1, **{k: norm(v) for k, v in commands.items()}}

    def run(self, model: str, seed: int, inputs: Inputs, index: str = "") -> RunSpec:
        """The run of (model, seed): directory, commands, fingerprint, config.json; ``index`` ("[2/6]") numbers it
        among the plan's."""
        inv, spec, pair = self.invocation, MODELS[model], pair_name(model, seed)
        out = self.run_dir(model, seed)
        commands = self.commands(model, seed, out, inputs.score_args)
        fp = self.fingerprint(model, commands, inputs)
        # runs finished before the entries-only lexicon fingerprint recorded the whole file's SHA-1
        earlier = {"lexicon_sha1": sha1_files([self.lexicon_path(spec.lexicon)])} if fp.get("lexicon_sha1") else {}
        checkpoint = self.checkpoint_path(out, model)
        config = {
            "task": inv.task.name,
            "model": model,
            "label": self.label(model),
            "seed": seed,
            "settings": inv.settings,
            "settings_label": inv.settings_label,
            "hparams": asdict(inv.hp),
            **spec.family.run_config(inv.ts),
            "patience": self.patience(model) if inv.hp.validate_every else None,
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
            training=spec.family.training_text(inv.hp, inv.ts, inv.lla),
            progress=f"{index}    {pair}: ",
            decode_jobs=inv.options.decode_jobs,
            keep_checkpoints=inv.options.keep_checkpoints,
            run_fields={"settings": inv.settings},
            **spec.family.resume_rule(inv.lla),
            equivalent=earlier,
            force=inv.options.force,
            index=index,
        )

    def plan(self, inputs: Inputs) -> Plan:
        """Every (model, seed) run of this invocation as data, in order, numbered."""
        pairs = self.invocation.pairs
        runs = {(m, s): self.run(m, s, inputs, f"[{k}/{len(pairs)}]") for k, (m, s) in enumerate(pairs, 1)}
        labels = {m: self.label(m) for m in self.invocation.models}
        return Plan(self.invocation, runs, labels, {m: self.lexicon_path(m) for m in self.lexicon_methods()})

    def planned_runs(self) -> Dict[Tuple[str, int], RunSpec]:
        """The plan's runs with nothing run or written (what --dry-run prints). Of the prepared data only the task's
        scoring options are known yet."""
        inv = self.invocation
        return dict(self.plan(Inputs(score_args=tuple(inv.task.prepare(dict(inv.files)).score_args))).runs)

    # -- a row's seeds trained together (--replicas) ---------------------------------------------------------------
    def replicated(self, model: str) -> bool:
        """Whether ``model``'s seeds train as one process (fairseq-train --replica-seeds): --replicas on, or auto
        where a CUDA GPU is visible; the rows of a family that takes them (the LSTM rows), two seeds or more."""
        inv = self.invocation
        if not MODELS[model].family.replicas or len(inv.seeds) < 2 or inv.options.replicas == "off":
            return False
        return inv.options.replicas == "on" or cuda_visible()

    def replica_dir(self, model: str, seeds: Sequence[int]) -> str:
        """WORK/<model>/replicas-1-2-3: the stacked checkpoints (for resuming), the group's config.json and log."""
        return commands.replicas_dir(f"{self.invocation.work}/{model}", seeds)

    def replica_command(self, model: str, group: Sequence[int], train: Sequence[str]) -> List[str]:
        """The one fairseq-train of ``group`` (``train``: the first seed's own command)."""
        return commands.replicated_train(train, group, self.replica_dir(model, group), self.run_dir(model, "{seed}"))
