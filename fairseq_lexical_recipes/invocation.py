"""One invocation of a recipe, checked and frozen (Invocation): the options of the command line or of a program that
drives the pipeline (options.RecipeOptions) with what they decide: the work directory and its layout, the data
files, the models, seeds and each family's settings.

check_options is the one place where those options are checked, with nothing written: the command line
(fairseq_lexical_recipes.cli, so the --jobs children and the GPU campaign's runs), examples/custom,
examples/compositional_split and examples/scan/width_proxy.py build their Invocation with it, and examples/pretrained
checks its own numbers and --work with check_bounds and check_work. check_extra_options checks --train-args and
--generate-args with fairseq's own parsers against the planned commands (the runner calls it before anything runs)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from fairseq_lexical_recipes.catalogue import MODELS, parse_models
from fairseq_lexical_recipes.commands import Layout
from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.families import LLA, ModelFamily
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.settings import (
    PRESET_LABELS,
    HParams,
    LlaSettings,
    TransformerSettings,
    effective_hparams,
    lla_settings,
    parse_seeds,
    transformer_settings,
)
from fairseq_lexical_recipes.tasks import TASKS, Task

# the options whose values argparse's types cannot bound: (name, least value; None: > 0); checked here only,
# before settings.py builds HParams, LlaSettings and TransformerSettings from them
BOUNDS = (
    ("lr", None),
    ("max_update", 1),
    ("batch_size", 1),
    ("beam", 1),
    ("max_len_b", 1),
    ("warmup_updates", 0),
    ("update_freq", 1),
    ("jobs", 1),
    ("decode_jobs", 1),
    ("lla_batch_size", 1),
    ("lla_lexicon_batch_size", 1),
    ("lla_lexicon_epochs", 1),
)


class OptionError(RecipeError):
    """An option's value that no run can take: a usage error (the command lines print their usage with it)."""


@dataclass(frozen=True)
class Invocation:
    """What one invocation runs, checked: its task, options, WORK and its layout, the data files found, the models
    and seeds, and the settings of each family of rows (the LSTM rows' HParams, TransformerSettings, LlaSettings)."""

    task: Task
    options: RecipeOptions
    work: str
    layout: Layout
    files: Mapping[str, str]  # role -> data file (Task.locate)
    models: Tuple[str, ...]
    seeds: Tuple[int, ...]
    jobs: int
    hp: HParams
    ts: TransformerSettings
    lla: LlaSettings
    settings: str  # the preset: "paper", "cpu-small", "cpu-medium" (examples/custom: "smoke")
    settings_label: str

    @property
    def damage(self) -> Optional[str]:
        """--damage's conditions ("auto": Table 2's), or None."""
        return self.options.damage

    @property
    def pairs(self) -> List[Tuple[str, int]]:
        """The (model, seed) pairs in the order they run: every model of a seed, then the next."""
        return [(model, seed) for seed in self.seeds for model in self.models]

    @property
    def concurrent(self) -> bool:
        """Whether the pairs run as --jobs child processes (more than one pair, --jobs > 1)."""
        return self.jobs > 1 and len(self.pairs) > 1

    def models_of(self, family: ModelFamily) -> List[str]:
        """The models of ``family`` among this invocation's, in order."""
        return [m for m in self.models if MODELS[m].family is family]


def check_bounds(values: Sequence[Tuple[str, object, Optional[float]]]) -> None:
    """(option, value, least) of each number given (None: not given); least None: the value must be > 0. An
    OptionError names the first out of bounds."""
    for option, value, least in values:
        if value is None:
            continue
        if (least is None and not value > 0) or (least is not None and value < least):
            raise OptionError(f"{option} must be {'> 0' if least is None else f'>= {least}'}, got {value}")


def check_work(work: str) -> str:
    """--work's absolute path; an error where it, or a directory above it, is a file (its first write would fail
    with a traceback)."""
    if os.path.exists(work) and not os.path.isdir(work):
        raise OptionError(f"--work {work}: a file, not a directory")
    path = os.path.abspath(work)
    while path != os.path.dirname(path):
        if os.path.exists(path) and not os.path.isdir(path):
            raise RecipeError(f"--work {work}: {path} is a file, not a directory")
        path = os.path.dirname(path)
    return os.path.abspath(work)


def given_lexicon(method: Optional[str], options: RecipeOptions) -> bool:
    """Whether a row of lexicon ``method`` reads the user's file (--lexicon replaces the Simple rows' lexicon)."""
    return method == "simple" and bool(options.lexicon)


def check_options(task: Task, options: RecipeOptions, settings: Optional[Tuple[str, str]] = None) -> Invocation:
    """The Invocation of ``options`` for ``task``, every option checked and nothing written. An option no run can take
    is an OptionError (a usage error); any other problem (data, files, combinations) a RecipeError. ``settings``:
    the name and label of a preset that is not the recipes' (examples/custom's --smoke and --cpu)."""
    check_bounds([(f"--{name.replace('_', '-')}", getattr(options, name), least) for name, least in BOUNDS])
    for name in ("train_args", "generate_args"):
        value = getattr(options, name)
        try:
            shlex.split(value)
        except ValueError as err:
            raise OptionError(f"--{name.replace('_', '-')} {value!r}: {err} (one quoted string of options)") from None
    data = options.data or task.default_data()
    if data is None:
        raise RecipeError(f"{task.name}: --data is required")
    work = check_work(options.work or task.default_work())
    hp, lla = effective_hparams(task, options), lla_settings(options)
    models = parse_models(options.models or task.default_models, task)
    ts = transformer_settings(options)
    # a --jobs child runs one model of the parent's, which has checked the rest
    if options.damage is not None and not any(MODELS[m].family.damage for m in models) and not options.as_job:
        raise RecipeError("--damage applies to the lla models (lla, lla_noadv); none is in --models")
    jobs = options.jobs if options.jobs is not None else task.default_jobs
    if jobs > 1 and TASKS.get(task.name) is not type(task):
        raise RecipeError("--jobs needs the recipe's command line (python -m fairseq_lexical_recipes TASK ...)")
    seeds = parse_seeds(options)
    if options.lexicon and not os.path.isfile(options.lexicon):
        raise RecipeError(f"--lexicon {options.lexicon}: file not found")
    if options.lexicon and not options.as_job and not any(given_lexicon(MODELS[m].lexicon, options) for m in models):
        readers = ", ".join(k for k, spec in MODELS.items() if given_lexicon(spec.lexicon, options))
        raise RecipeError(
            f"--lexicon {options.lexicon}: none of --models ({', '.join(models)}) would read it; it "
            f"replaces the lexicon of the Simple rows ({readers})"
        )
    if not os.path.isdir(data):
        raise RecipeError(f"--data {data}: not a directory")
    files = task.locate(os.path.abspath(data))
    patience = options.patience
    lla_rows = [m for m in models if MODELS[m].family is LLA]
    if lla_rows and patience and hp.validate_every is not None and patience < lla.lexicon_epochs:
        # fairseq counts every validation, those of the Lexicon Unit epochs too (their lla_selection is -inf): with
        # fewer than N it would stop before epoch N+1
        raise RecipeError(
            f"--patience {patience} with the lla rows: fairseq counts the validations of the "
            f"Lexicon Unit epochs 1-{lla.lexicon_epochs} too, so training would stop before "
            f"the other modules start; give --patience {lla.lexicon_epochs} or more, or 0 "
            f"(docs/lla.md)"
        )
    return Invocation(
        task=task,
        options=options,
        work=work,
        layout=Layout.of(work),
        files=files,
        models=tuple(models),
        seeds=tuple(seeds),
        jobs=jobs,
        hp=hp,
        ts=ts,
        lla=lla,
        settings=settings[0] if settings else options.preset,
        settings_label=settings[1] if settings else PRESET_LABELS[options.preset],
    )


def check_extra_options(options: RecipeOptions, commands: Mapping[str, Mapping[str, List[str]]]) -> None:
    """--train-args and --generate-args, parsed by fairseq's own parsers against each model's real commands
    (``commands``: model -> {"train": ..., "generate": ...}, its task and architecture), before anything runs or is
    written: a mistyped option must not wait for the first model's training to end."""
    if not (options.train_args.strip() or options.generate_args.strip()):
        return
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # fairseq's import-time notices
        from fairseq import options as fairseq_options

    for model, command in commands.items():
        for step, parser, given in (
            ("train", fairseq_options.get_training_parser, options.train_args),
            ("generate", fairseq_options.get_generation_parser, options.generate_args),
        ):
            if not given.strip():
                continue
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    fairseq_options.parse_args_and_arch(parser(), input_args=[str(c) for c in command[step][1:]])
            except SystemExit:
                why = (err.getvalue().strip().splitlines() or ["rejected"])[-1].split("error: ", 1)[-1]
                option = "--train-args" if step == "train" else "--generate-args"
                raise RecipeError(f"{option} {given!r}: fairseq-{step} ({model}) says: {why}") from None
