"""Runs examples/cat_oci's recipe (CatOciRunner) in its work directory: the checks before anything is written, WORK's
lock and config.json, the split; then one stage per training size (runner.Stage, run by runner.run_stages, as the
paper recipes' one stage is): the size prepared (prepare.Preparation), its runs planned (recipe.CatOciRecipe.plan)
and executed (runner.execute_runs: execute.execute_run, finished runs reused, unfinished ones resumed); last the
table of BLEU and chrF per size and system, and WORK/summary.json."""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time
from dataclasses import asdict
from typing import Hashable, List

from lexical_offline.metrics.aggregate import aggregate_dir, format_mean_std
from lexical_offline.textio import read_lines

from fairseq_lexical_recipes import fairseq_log, ownership
from fairseq_lexical_recipes.console import RecipeError, hms, say
from fairseq_lexical_recipes.execute import RunSpec, execute_run
from fairseq_lexical_recipes.reports import table
from fairseq_lexical_recipes.rundir import lock_work_directory
from fairseq_lexical_recipes.runner import Stage, execute_runs, run_stages
from fairseq_lexical_recipes.tasks.cat_oci.prepare import Preparation
from fairseq_lexical_recipes.tasks.cat_oci.recipe import PAPER_5K, SYSTEMS, CatOciRecipe
from fairseq_lexical_recipes.textio import read_json, write_json


class CatOciRunner:
    """Runs ``recipe`` (recipe.CatOciRecipe) in its WORK."""

    def __init__(self, recipe: CatOciRecipe):
        self.recipe, self.invocation = recipe, recipe.invocation
        self.preparation = Preparation(recipe)

    # -- before anything is written ------------------------------------------------------------------------------
    def check_before_writing(self) -> None:
        """A file of a name this invocation writes that is not the driver's stops it, with nothing written."""
        found = [p for d, names in self.recipe.writes().items() for p in ownership.foreign_in(d, names)]
        ownership.refuse_foreign(found, "this run of the driver")

    def earlier_work(self) -> bool:
        """Whether WORK was made by a version of this driver before the ownership records (its config.json, no
        record beside it): its files are then adopted by the names the driver writes."""
        work = self.invocation.work
        config = work + "/config.json"
        if os.path.exists(f"{work}/{ownership.OWNED}") or not os.path.isfile(config):
            return False
        try:
            recorded = read_json(config)
        except RecipeError:
            return False
        return isinstance(recorded, dict) and all(
            k in recorded for k in ("settings_label", "sizes", "systems", "command")
        )

    # -- the stages: one per training size -----------------------------------------------------------------------
    def stage(self, size: int) -> Stage:
        """Training size ``size``: its SentencePiece model, data-bin and lexicon, then its runs."""
        prep = self.preparation
        return Stage(lambda: prep.size(size), lambda: self.recipe.plan(size, prep.data_step(size).key))

    def run_one(self, key: Hashable, run: RunSpec) -> dict:
        """Execute ``run`` and say its result (with the dev set's last mean gate of the PGN systems)."""
        log = run.out + "/train.log"
        outcome = execute_run(run, after_run=lambda _: {"valid_p_gate_last": fairseq_log.last_valid_p_gate(log)})
        score = outcome.score
        if outcome.reused:
            say(f"{run.who}: BLEU {score['bleu']:.2f} chrF {score['chrf']:.2f} (done before: skipped)")
            return score
        p_gate = outcome.added["valid_p_gate_last"]
        gate = f"; dev p_gate {p_gate:.3f} (1 - p_copy)" if p_gate is not None else ""
        say(
            f"{run.who}: BLEU {score['bleu']:.2f} chrF {score['chrf']:.2f} "
            f"(train {hms(outcome.train_s)}, {outcome.training['text']}; decode {hms(outcome.generate_s)}{gate})"
        )
        return score

    # -- everything ----------------------------------------------------------------------------------------------
    def run(self) -> int:
        t0 = time.time()
        inv = self.invocation
        a, s = inv.options, inv.settings
        ts = s.ts
        say(f"== cat_oci ({a.direction}): work directory {inv.work}")
        say(
            f"== settings: {inv.label}; Adam {ts.adam_betas}, lr {ts.lr:g} (inverse sqrt, {ts.warmup} warm-up), "
            + (f"--max-tokens {ts.max_tokens}" if ts.max_tokens else f"batch {ts.batch_size} sentences")
            + f", label smoothing {ts.label_smoothing:g}, {ts.max_update} updates max, dev loss every "
            f"{s.validate_every} (patience {s.patience}), checkpoint_best, beam {s.beam}; "
            f"SentencePiece BPE {a.vocab_size}; lexicon {a.lexicon_method}"
        )
        say(f"== systems: {', '.join(inv.systems)}; sizes: {list(inv.sizes)}; seeds: {list(inv.seeds)}")
        earlier = self.earlier_work()
        if not earlier:  # (an earlier version's WORK is checked once adopted, under the lock)
            self.check_before_writing()  # a refusal leaves WORK as it was
        os.makedirs(inv.work, exist_ok=True)
        self._lock = lock_work_directory(inv.work)  # held until the process ends
        if earlier:
            for directory, names in self.recipe.writes().items():
                ownership.adopt([directory], names)
        self.check_before_writing()  # unchanged since, now that no other driver can write
        self.write_config()
        self.preparation.split()
        run_stages([self.stage(size) for size in inv.sizes], lambda plan: execute_runs(plan.runs, self.run_one))
        self.report(time.time() - t0)
        return 0

    def write_config(self) -> None:
        inv = self.invocation
        a, s = inv.options, inv.settings
        with ownership.writing(inv.work):
            write_json(
                inv.work + "/config.json",
                {
                    "settings": "cpu-small" if a.cpu_small else "paper",
                    "settings_label": inv.label,
                    "transformer": asdict(s.ts),
                    "validate_every": s.validate_every,
                    "patience": s.patience,
                    "dropout": s.dropout,
                    "beam": s.beam,
                    "vocab_size": a.vocab_size,
                    "lexicon_method": a.lexicon_method,
                    "systems": list(inv.systems),
                    "sizes": list(inv.sizes),
                    "seeds": list(inv.seeds),
                    "command": " ".join(sys.argv),
                    "date": datetime.datetime.now().isoformat(),
                    "host": platform.node(),
                },
            )

    def report(self, seconds: float) -> None:
        """The table of test BLEU and chrF (mean +/- std over seeds) per system and size, and WORK/summary.json."""
        inv = self.invocation
        rows: List[List[str]] = [["system"] + [f"{n} {m}" for n in inv.sizes for m in ("BLEU", "chrF")]]
        summary = {}
        for size in inv.sizes:
            summary[size] = aggregate_dir(self.recipe.size_dir(size), models=list(inv.systems), seeds=list(inv.seeds))
        for system in inv.systems:
            cells = []
            for size in inv.sizes:
                metrics = summary[size].get(system, {}).get("metrics", {})
                for m in ("bleu", "chrf"):
                    st = metrics.get(m)
                    cells.append(
                        "n/a" if not st else (f"{st['mean']:.2f}" if len(inv.seeds) == 1 else format_mean_std(st))
                    )
            rows.append([system] + cells)
        say("")
        say(
            f"== test BLEU (sacrebleu 13a on SentencePiece-decoded text) and chrF, "
            f"{len(read_lines(f'{inv.work}/data/test.{inv.tgt}'))} sentences, {len(inv.seeds)} seed(s); {inv.label}"
        )
        say(table(rows))
        say(
            "   paper (Table 2, spBLEU at 5k, other data, not comparable): "
            + "; ".join(f"{p}: NMT {v['nmt']}, PGN {v['pgn']}" for p, v in PAPER_5K.items())
            + "; no Catalan-Occitan and no PGN + lexicon row"
        )
        with ownership.writing(inv.work):
            write_json(
                inv.work + "/summary.json",
                {
                    "settings_label": inv.label,
                    "metrics": "BLEU: sacrebleu --tokenize 13a on detokenised text; chrF",
                    "sizes": {
                        str(n): {m: dict(label=SYSTEMS[m].label, **summary[n][m]) for m in summary[n]}
                        for n in inv.sizes
                    },
                    "paper_5k_spbleu_other_pairs": PAPER_5K,
                    "wall_s": round(seconds, 1),
                },
            )
        say(f"== summary: {inv.work}/summary.json; total wall time {hms(seconds)}")
