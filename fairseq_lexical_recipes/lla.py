"""The lla rows (Thrush 2020, docs/lla.md): the schedule and the model selection as one fairseq-train call through the
task `lla_translation` (fairseq_lexical/tasks/lla_translation.py): the Lexicon Unit alone with its own batch size for
epochs 1..N, the unit with the lowest validation BCE loaded at epoch N+1, then the other modules to the last epoch,
fairseq's checkpoint_best.pt the first epoch with the best validation score. What was selected is read back from
the task's lla_selection.json in the run's directory (selection.json). And --damage: tools/damage.py on the
evaluated checkpoint (Thrush 2020, Table 2). Mixed into runner.Recipe."""

from __future__ import annotations

import math
import os
import re
from typing import Dict, List, Optional

from fairseq_lexical_recipes import commands, ownership
from fairseq_lexical_recipes.catalogue import MODELS
from fairseq_lexical_recipes.console import RecipeError, hms, say, show
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.steps import differences
from fairseq_lexical_recipes.textio import read_json, write_json

# The Lexicon Unit's validation BCE as lexical_cross_entropy logs it (an auxiliary loss named "lexicon").
LEXICON_UNIT_METRIC = "aux_lexicon"
# What lla_translation logs at each validation: the selection metric where it beats every earlier epoch after N.
SELECTION_METRIC = "lla_selection"
# lla_translation's record of its selection in --save-dir (fairseq_lexical/tasks/lla_translation.py)
SELECTION_FILE = "lla_selection.json"
# fairseq's line after a save: it names the first of the files written (checkpoint_best.pt where the best improved,
# else checkpoint_last.pt), copied to the others
_SAVED_LINE = re.compile(r"Saved checkpoint \S+\.pt \(epoch (\d+) @")
LLA_NOT_RESUMABLE = "an lla run stopped within the Lexicon Unit epochs: their selection is not in {last}"


class LlaSteps:
    """Recipe methods of the lla rows (self: a runner.Recipe)."""

    def lla_checkpoint_name(self) -> str:
        """The evaluated checkpoint: the first epoch with the best validation score (fairseq's checkpoint_best.pt
        under lla_translation's lla_selection), or the last epoch's."""
        return "checkpoint_best.pt" if self.lla.checkpoint == "best" else "checkpoint_last.pt"

    def lla_train_command(self, model: str, seed: int, out: str) -> List[str]:
        """Thrush's schedule as one fairseq-train call (docs/lla.md, the task lla_translation): the Lexicon Unit
        alone with its own batch size for epochs 1..N (the model's --lexicon-unit-epochs), the other modules to the
        last epoch. --lla-checkpoint best: every epoch validated and saved, the Lexicon Unit with the lowest
        validation BCE used from epoch N+1, checkpoint_best.pt the first epoch with the best validation score.
        last: the unit of epoch N and the last epoch's model; without a validation set a checkpoint is written only
        at the end (fairseq does not save when --max-epoch ends training: --save-interval = the last epoch)."""
        hp, lla = self.hp, self.lla
        cmd = [
            "--task",
            "lla_translation",
            "--lexicon-unit-batch-size",
            str(lla.lexicon_batch_size),
            "--batch-size",
            str(lla.batch_size),
            "--max-epoch",
            str(lla.max_epoch),
        ]
        patience = self.lla_patience()
        if lla.checkpoint == "best":
            metric, options = self.task.lla_selection
            cmd += [
                "--lexicon-unit-selection",
                "valid_bce",
                "--validate-interval",
                "1",
                "--save-interval",
                "1",
                "--best-checkpoint-metric",
                SELECTION_METRIC,
                "--maximize-best-checkpoint-metric",
                "--lla-selection-metric",
                metric,
                *options,
            ]
        else:
            cmd += ["--lexicon-unit-selection", "last"]
            if hp.validate_every is None:
                cmd += ["--disable-validation", "--save-interval", str(lla.max_epoch)]
            else:
                cmd += ["--validate-interval", "1", "--save-interval", "1"]
                if patience:
                    # early stopping on the validation loss of the epochs after N only (as the second of the two
                    # calls did): lla_selection is -inf in epochs 1..N and -loss where the loss improves after
                    cmd += [
                        "--best-checkpoint-metric",
                        SELECTION_METRIC,
                        "--maximize-best-checkpoint-metric",
                        "--lla-selection-metric",
                        "loss",
                        "--lla-selection-minimize",
                    ]
        if patience:
            cmd += ["--patience", str(patience)]  # the paper: no early stopping
        # Adam at a constant rate, no clipping; no --max-update: the schedule is in epochs
        optimisation = ["--lr", f"{lla.lr:g}", "--lr-scheduler", "fixed", "--clip-norm", "0"]
        return self.fairseq_train(model, seed, out, optimisation=optimisation, batching=[], schedule=[], after=cmd)

    def lla_patience(self) -> Optional[int]:
        """--patience where given and the task validates. fairseq counts every validation, those of the Lexicon
        Unit epochs too (their lla_selection is -inf): with fewer than N it would stop before epoch N+1."""
        patience = self.options.patience
        if not patience or self.hp.validate_every is None:
            return None
        if patience < self.lla.lexicon_epochs:
            raise RecipeError(
                f"--patience {patience} with the lla rows: fairseq counts the validations of the "
                f"Lexicon Unit epochs 1-{self.lla.lexicon_epochs} too, so training would stop before "
                f"the other modules start; give --patience {self.lla.lexicon_epochs} or more, or 0 "
                f"(docs/lla.md)"
            )
        return patience

    def lla_resumable(self, out: str) -> bool:
        """Whether an unfinished lla run in OUT can resume from its checkpoint_last.pt. lla_translation refuses to
        resume in epochs 1..N+1 with the Lexicon Unit selection (fairseq keeps no task state in a checkpoint: the
        units of the earlier epochs are gone), so such a run starts again. The epoch is the last one fairseq logged
        as saved (a checkpoint written just before an interruption, not yet logged, is a later epoch: never a
        wrong resume)."""
        if self.lla.checkpoint != "best":
            return True
        saved = 0
        try:
            with open(f"{out}/train.log", errors="replace") as f:
                for line in f:
                    m = _SAVED_LINE.search(line)
                    if m:
                        saved = int(m.group(1))
        except OSError:
            return False
        return saved > self.lla.lexicon_epochs  # resumes at epoch saved + 1 > N + 1

    def lla_selection(self, out: str) -> dict:
        """What lla_translation selected, from OUT/lla_selection.json (the task writes it after each validation):
        the epoch of checkpoint_best.pt (the last epoch whose lla_selection is finite: the first epoch with the best
        validation score after N) with the score curve of the epochs after N, and the Lexicon Unit used from epoch
        N+1 with its validation BCE curve of epochs 1..N. Written to OUT/selection.json by the caller."""
        path, n = f"{out}/{SELECTION_FILE}", self.lla.lexicon_epochs
        try:
            record = read_json(path)
            validations = {int(e): v for e, v in record["validations"].items()}
            unit = record["lexicon_unit"]
            metric = record["metric"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RecipeError(f"{path}: not lla_translation's selection record ({e})") from None
        curve = {e: v["score"] for e, v in sorted(validations.items()) if e > n and v["score"] is not None}
        selected = [e for e, v in validations.items() if e > n and math.isfinite(v[SELECTION_METRIC] or -math.inf)]
        if not curve or not selected:
            raise RecipeError(f"{path} has no validation {metric} / {SELECTION_METRIC} after epoch {n}")
        epoch = max(selected)
        if curve.get(epoch) is None:
            raise RecipeError(
                f"{path}: no validation {metric} at epoch {epoch}, the last with a finite {SELECTION_METRIC}"
            )
        unit_curve = {int(e): v for e, v in unit["curve"].items() if int(e) <= n}
        if unit["epoch"] is None or not unit_curve:
            raise RecipeError(
                f"{path} has no Lexicon Unit selection (made at epoch {n + 1}) or no validation "
                f"{LEXICON_UNIT_METRIC} in epochs 1-{n}"
            )
        return {
            "metric": metric,
            "epoch": epoch,
            metric: curve[epoch],
            "last_epoch": max(curve),
            "updates": validations[epoch]["num_updates"],
            "curve": curve,
            "lexicon_unit": {
                "metric": LEXICON_UNIT_METRIC,
                "epoch": unit["epoch"],
                LEXICON_UNIT_METRIC: unit[LEXICON_UNIT_METRIC],
                "last_epoch": n,
                "curve": unit_curve,
            },
        }

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
        return commands.damage(
            self.layout.bin,
            self.checkpoint_path(out, model),
            self.damage_conditions(model),
            seed,
            self.hp,
            self.damage_examples(),
        )

    def damage_examples(self) -> List[str]:
        """The task's Table 2 sentence(s) whose words are all in the source dictionary (damage.py refuses others)."""
        path = self.layout.bin + "/dict.src.txt"
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
        if os.path.isfile(path) and not self.options.force and not differences(read_json(path), {"command": show(cmd)}):
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
