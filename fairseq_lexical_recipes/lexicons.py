"""The lexicons of an invocation of the recipes (tools/build_lexicon.py on WORK/data's lexicon corpus, one per
method the models read, or the user's --lexicon file), built once and reused while the data and command are the
same: the runner's steps of a recipe's lexicons (their paths and commands are the recipe's, recipe.Recipe)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from lexical_offline.textio import write_parallel

from fairseq_lexical_recipes import commands, ownership
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS
from fairseq_lexical_recipes.console import hms, say, show
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import RunDirectory
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks import Prepared
from fairseq_lexical_recipes.textio import count_entries, sha1_lexicon_entries

if TYPE_CHECKING:
    from fairseq_lexical_recipes.recipe import Recipe


def step(recipe: "Recipe", method: str, data_sha1: str) -> Step:
    """The build of ``method``'s lexicon as a Step: up to date while the data (``data_sha1``) and command are."""
    cmd, layout = recipe.lexicon_command(method), recipe.invocation.layout
    key = {"data_sha1": data_sha1, "command": commands.stamp_command(cmd[1:], recipe.invocation.work)}
    log = f"{layout.lexicons}/{method}.log"
    old = {"command": show(cmd[1:])}  # recorded before stamps were portable
    return Step(f"build_lexicon.py --method {method}", f"{layout.lexicons}/{method}.json", key, [cmd[-2]], log, old)


def to_be_built(recipe: "Recipe", method: str, prep: Prepared, data_sha1: str) -> Optional[str]:
    """The SHA-1 (sha1_lexicon_entries) of the lexicon this invocation would build, where it would replace the
    one that finished or checkpointed runs were made with (built aside, in a temporary folder), else None."""
    import tempfile

    inv = recipe.invocation
    if inv.options.force or recipe.given_lexicon(method) or step(recipe, method, data_sha1).up_to_date():
        return None
    if not any(
        MODELS[m].lexicon == method and RunDirectory(recipe.run_dir(m, s), {}, "", "").has_results()
        for m, s in inv.pairs
    ):
        return None
    with tempfile.TemporaryDirectory(prefix="lexicon-check-") as tmp:
        write_parallel(f"{tmp}/lexcorpus", prep.lexcorpus)
        cmd = recipe.lexicon_command(method, tmp, tmp)
        run_logged(cmd, f"{tmp}/{method}.log", what=f"build_lexicon.py --method {method}")
        return sha1_lexicon_entries(cmd[-2])


def build(recipe: "Recipe", data_sha1: str) -> None:
    """Each lexicon the models read, built unless up to date (or given with --lexicon)."""
    options = recipe.invocation.options
    for method in recipe.lexicon_methods():
        path = recipe.lexicon_path(method)
        desc = LEXICON_METHODS[method][1]
        if recipe.given_lexicon(method):
            say(f"== lexicon (given with --lexicon): {count_entries(path)} entries in {path}")
            continue
        made, cmd = step(recipe, method, data_sha1), recipe.lexicon_command(method)
        # a --jobs child's --force re-runs its pair only: the parent has rebuilt the lexicons its siblings use
        force = options.force and not options.as_job
        secs = None
        if force or not made.up_to_date():
            with ownership.writing(recipe.invocation.layout.lexicons):
                secs = made.run(lambda: run_logged(cmd, made.log, what=made.name), force)
        done = "up to date" if secs is None else hms(secs)
        say(f"== lexicon ({desc}): {count_entries(path)} entries in {path} ({done})")
