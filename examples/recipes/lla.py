"""The lla rows (Thrush 2020, docs/lla.md): the schedule as two fairseq-train calls (the Lexicon Unit alone, then
the rest), the Lexicon Unit with the lowest validation BCE put into the resumed checkpoint, and the first epoch with
the best validation score retrained to. Mixed into runner.Recipe."""
from __future__ import annotations

import os
from typing import List, Tuple

from recipes.console import RecipeError, say
from recipes.fairseq_log import validation_metric
from recipes.process import run_logged
from recipes.textio import read_json, write_json

# The Lexicon Unit's validation BCE as lexical_cross_entropy logs it (an auxiliary loss named "lexicon").
LEXICON_UNIT_METRIC = "aux_lexicon"
# The Lexicon Unit's parameters in an lla_lstm checkpoint (tools/damage.py's "lexicon" group).
LEXICON_UNIT_PREFIX = "encoder.lexicon_unit."


class LlaSteps:
    """Recipe methods of the lla rows (self: a runner.Recipe)."""

    def lla_train_commands(self, model: str, seed: int, out: str) -> Tuple[List[str], List[str]]:
        """Thrush's schedule as two fairseq-train calls (docs/lla.md): the Lexicon Unit alone with its own batch
        size for epochs 1..N, then (resuming checkpoint_last.pt) the other modules to the last epoch. Without a
        validation set a checkpoint is written only at the end of each call (--save-interval = its last epoch;
        fairseq does not save when --max-epoch ends training); with one, every epoch is validated and saved."""
        hp, lla = self.hp, self.lla
        phases = []
        for batch, last in ((lla.lexicon_batch_size, lla.lexicon_epochs), (lla.batch_size, lla.max_epoch)):
            cmd = ["--batch-size", str(batch), "--max-epoch", str(last)]
            lexicon_phase = last == lla.lexicon_epochs
            if lla.checkpoint == "best" and lexicon_phase:
                # the Lexicon Unit with the lowest validation BCE is kept (checkpoint_best.pt; select_lexicon_unit)
                cmd += ["--validate-interval", "1", "--save-interval", "1", "--best-checkpoint-metric",
                        LEXICON_UNIT_METRIC]
            elif lla.checkpoint == "best":
                # every epoch validated (the criterion's greedy exact match); the one to keep is picked afterwards
                # from the log (select_lla_epoch), so only the last epoch is saved here
                metric, options = self.task.lla_selection
                cmd += ["--validate-interval", "1", "--save-interval", str(last), "--best-checkpoint-metric",
                        metric, "--maximize-best-checkpoint-metric", *options]
            elif hp.validate_every is None or lexicon_phase:
                cmd += ["--disable-validation", "--save-interval", str(last)]
            else:
                cmd += ["--validate-interval", "1", "--save-interval", "1"]
            if self.args.patience and hp.validate_every is not None and not lexicon_phase:
                cmd += ["--patience", str(self.args.patience)]  # the paper: no early stopping
            # Adam at a constant rate, no clipping; no --max-update: the schedule is in epochs
            phases.append(self.fairseq_train(model, seed, out, ["--lr", f"{lla.lr:g}", "--lr-scheduler", "fixed",
                                                                "--clip-norm", "0"], [], [], after=cmd))
        return phases[0], phases[1]

    def select_lexicon_unit(self, out: str) -> dict:
        """Thrush's Lexicon Unit: the one with the lowest validation BCE over the Lexicon Unit epochs (fairseq's
        checkpoint_best.pt of the first call; among equal logged values, fairseq keeps the later epoch). Its
        parameters replace those in checkpoint_last.pt, which the second call resumes (the other modules are
        untrained then, and the epoch count stays the paper's: the second call starts at epoch N + 1)."""
        import torch

        metric, last_epoch = LEXICON_UNIT_METRIC, self.lla.lexicon_epochs
        best_path, last_path = f"{out}/checkpoint_best.pt", f"{out}/checkpoint_last.pt"
        if os.path.isfile(f"{out}/lexicon_unit_selection.json") and not os.path.isfile(best_path):
            return read_json(f"{out}/lexicon_unit_selection.json")  # done before an interruption
        curve = {e: v for e, v in validation_metric(f"{out}/train.log", metric).items() if e <= last_epoch}
        if not curve:
            raise RecipeError(f"{out}/train.log has no validation {metric} lines (Lexicon Unit selection)")
        best = torch.load(best_path, map_location="cpu", weights_only=False)
        epoch = best["extra_state"]["train_iterator"]["epoch"] - 1  # saved at an epoch's end: the next one
        if curve.get(epoch) != min(curve.values()):
            raise RecipeError(f"{best_path} is epoch {epoch}, whose validation {metric} is not the lowest logged "
                              f"({min(curve.values())}; see {out}/train.log)")
        state = torch.load(last_path, map_location="cpu", weights_only=False)
        unit = {k: v for k, v in best["model"].items() if k.startswith(LEXICON_UNIT_PREFIX)}
        if not unit or set(unit) != {k for k in state["model"] if k.startswith(LEXICON_UNIT_PREFIX)}:
            raise RecipeError(f"{best_path} and {last_path} do not hold the same {LEXICON_UNIT_PREFIX}* parameters")
        state["model"].update(unit)
        # the second call selects on another metric: the Lexicon Unit's best BCE must not seed its comparison
        state["extra_state"].pop("best", None)
        torch.save(state, last_path + ".tmp")
        os.replace(last_path + ".tmp", last_path)
        os.remove(best_path)
        selection = {"metric": metric, "epoch": epoch, metric: curve[epoch], "last_epoch": last_epoch,
                     "curve": curve}
        write_json(f"{out}/lexicon_unit_selection.json", selection)
        return selection

    def select_lla_epoch(self, model: str, seed: int, out: str, command: List[str], index: str) -> dict:
        """Thrush's model selection: the first epoch with the best validation score (Task.lla_selection; the log
        of the second call), then the second call again from the Lexicon Unit checkpoint, stopped at that epoch
        (fairseq seeds every update, so it retraces the same epochs: checked against the logged score)."""
        metric = self.task.lla_selection[0]
        curve = {e: v for e, v in validation_metric(f"{out}/train.log", metric).items()
                 if e > self.lla.lexicon_epochs}  # (the Lexicon Unit epochs are validated too)
        if not curve:
            raise RecipeError(f"{out}/train.log has no validation {metric} lines (lla checkpoint selection)")
        best = max(curve.values())
        epoch = min(e for e, v in curve.items() if v == best)
        selection = {"metric": metric, "epoch": epoch, metric: best, "last_epoch": max(curve), "curve": curve}
        if epoch < max(curve):
            say(f"{index}    {model} seed {seed}: best validation {metric} {best:g} first at epoch {epoch}; "
                f"retraining to it from the Lexicon Unit checkpoint")
            cmd = list(command)
            cmd[cmd.index("--max-epoch") + 1] = str(epoch)
            cmd[cmd.index("--save-interval") + 1] = str(epoch)
            cmd += ["--restore-file", f"{out}/checkpoint_lexicon_unit.pt"]
            os.remove(f"{out}/checkpoint_last.pt")
            run_logged(cmd, f"{out}/train_selected.log", what=f"fairseq-train to epoch {epoch} ({model}, seed {seed})")
            again = validation_metric(f"{out}/train_selected.log", metric).get(epoch)
            if again != best:
                raise RecipeError(f"retraining {model} seed {seed} to epoch {epoch} gave validation {metric} "
                                  f"{again}, not the {best} of the first run (see {out}/train_selected.log)")
        if os.path.isfile(f"{out}/lexicon_unit_selection.json"):
            selection["lexicon_unit"] = read_json(f"{out}/lexicon_unit_selection.json")
        write_json(f"{out}/selection.json", selection)
        return selection
