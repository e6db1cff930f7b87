"""What an invocation of the recipes says before it runs: its settings, one line per family of rows, and under
--dry-run the commands it would run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairseq_lexical_recipes import lla
from fairseq_lexical_recipes.catalogue import MODELS
from fairseq_lexical_recipes.console import say, show
from fairseq_lexical_recipes.families import LLA, LSTM, TRANSFORMER
from fairseq_lexical_recipes.settings import cpu_sized
from fairseq_lexical_recipes.vocabulary import data_warnings

if TYPE_CHECKING:
    from fairseq_lexical_recipes.recipe import Recipe


def say_settings(recipe: "Recipe") -> None:
    """The settings of ``recipe``, one line per family of rows it runs."""
    inv = recipe.invocation
    hp = inv.hp
    say(f"== settings: {inv.settings_label}")
    # the Akyurek & Andreas line only where such rows run: the Transformer and LLA rows have settings of their own
    lstm_models, transformer_models, lla_models = inv.models_of(LSTM), inv.models_of(TRANSFORMER), inv.models_of(LLA)
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
    if transformer_models:
        ts = inv.ts
        batch = " + ".join(
            x
            for x in (
                f"--max-tokens {ts.max_tokens}" if ts.max_tokens else "",
                f"--batch-size {ts.batch_size}" if ts.batch_size else "",
            )
            if x
        )
        tag = (
            f" [{inv.options.preset.upper()}: _tiny archs, not the paper's sizes]"
            if cpu_sized(inv.options.preset)
            else " [sizes: transformer_iwslt_de_en as the R-Dangle paper; optimiser: fairseq's iwslt recipe, "
            "max_update our choice (the paper gives none)]"
        )
        say(
            f"== {', '.join(transformer_models)}: Adam {ts.adam_betas}, lr {ts.lr:g} (inverse sqrt, "
            f"{ts.warmup} warm-up), weight decay {ts.weight_decay:g}, label smoothing {ts.label_smoothing:g}, "
            f"clip {ts.clip_norm:g}, {batch} x {ts.update_freq}, {ts.max_update} updates, {evaluation}{tag}"
        )
    if lla_models:
        say(
            f"== {', '.join(lla_models)} (Thrush 2020, --arch {recipe.arch(MODELS['lla'])}): "
            f"{inv.lla.describe()} (one fairseq-train call, --task lla_translation; evaluated: "
            f"{lla.checkpoint_name(inv.lla)}); beam {hp.beam}; "
            f"scored with exact match and Thrush's precision/recall/token accuracy"
            + ("; --damage " + inv.damage if inv.damage is not None else "")
        )
    say(f"== models: {', '.join(inv.models)}; seeds: {', '.join(map(str, inv.seeds))}")


def say_dry_run(recipe: "Recipe") -> None:
    """What --dry-run prints: the data's warnings, then every command the invocation would run."""
    inv = recipe.invocation
    # the tasks' prepare only reads (the runner writes): the data's warnings, as a real run gives them
    prep = inv.task.prepare(dict(inv.files))
    for note in data_warnings(prep):
        say(note)
    say(
        "== dry run: data files found ("
        + ", ".join(f"{k}: {v}" for k, v in inv.files.items())
        + "); the commands would be:"
    )
    say(f"   fairseq-preprocess: {show(recipe.preprocess_command(joined=False))}")
    joined = [m for m, spec in MODELS.items() if spec.joined_dictionary]
    if any(m in joined for m in inv.models):
        say(
            f"   fairseq-preprocess (joined dictionary, for {', '.join(joined)}): "
            f"{show(recipe.preprocess_command(joined=True))}"
        )
    say(
        "   lexicons: "
        + "; ".join(
            f"given with --lexicon: {recipe.lexicon_path(m)} (not built)"
            if recipe.given_lexicon(m)
            else show(recipe.lexicon_command(m))
            for m in recipe.lexicon_methods()
        )
    )
    for (model, seed), run in recipe.planned_runs().items():
        say(f"{run.who}:")
        for k, cmd in run.commands.items():
            say(f"   {k}: {show(cmd)}")
        if inv.damage is not None and MODELS[model].family.damage:
            say(f"   damage: {show(recipe.damage_command(model, seed, run.out))}")
    if inv.concurrent:
        total = len(inv.pairs)
        say(
            f"== --jobs {inv.jobs}: up to {min(inv.jobs, total)} of these {total} (model, seed) "
            f"pairs would run at a time, each as its own recipe process (log: "
            f"{inv.work}/jobs/<model>_seed<N>.log)"
        )
