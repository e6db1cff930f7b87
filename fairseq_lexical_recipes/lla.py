"""The lla rows (Thrush 2020, docs/lla.md): the schedule and the model selection as one fairseq-train call through the
task `lla_translation` (fairseq_lexical/tasks/lla_translation.py): the Lexicon Unit alone with its own batch size for
epochs 1..N, the unit with the lowest validation BCE loaded at epoch N+1, then the other modules to the last epoch,
fairseq's checkpoint_best.pt the first epoch with the best validation score. What was selected is read back from
the task's lla_selection.json in the run's directory (selection.json). And --damage: tools/damage.py on the
evaluated checkpoint (Thrush 2020, Table 2). The family families.LLA asks these functions for its rows' training,
checkpoint and resuming; the planner and the runner for the rest."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from fairseq_lexical_recipes import ownership
from fairseq_lexical_recipes.console import RecipeError, hms, say, show
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.steps import differences
from fairseq_lexical_recipes.settings import LlaSettings
from fairseq_lexical_recipes.textio import read_json, write_json

if TYPE_CHECKING:
    from fairseq_lexical_recipes.invocation import Invocation

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


def checkpoint_name(lla: LlaSettings) -> str:
    """The evaluated checkpoint: the first epoch with the best validation score (fairseq's checkpoint_best.pt under
    lla_translation's lla_selection), or the last epoch's."""
    return "checkpoint_best.pt" if lla.checkpoint == "best" else "checkpoint_last.pt"


def training(invocation: "Invocation") -> Dict[str, List[str]]:
    """Thrush's schedule as one fairseq-train call (docs/lla.md, the task lla_translation), as commands.fairseq_train's
    optimisation, batching, schedule and ``after``: the Lexicon Unit alone with its own batch size for epochs 1..N
    (the model's --lexicon-unit-epochs), the other modules to the last epoch. --lla-checkpoint best: every epoch
    validated and saved, the Lexicon Unit with the lowest validation BCE used from epoch N+1, checkpoint_best.pt the
    first epoch with the best validation score. last: the unit of epoch N and the last epoch's model; without a
    validation set a checkpoint is written only at the end (fairseq does not save when --max-epoch ends training:
    --save-interval = the last epoch)."""
    hp, lla = invocation.hp, invocation.lla
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
    given = patience(invocation.options.patience, hp.validate_every)
    if lla.checkpoint == "best":
        metric, options = invocation.task.lla_selection
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
            if given:
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
    if given:
        cmd += ["--patience", str(given)]  # the paper: no early stopping
    # Adam at a constant rate, no clipping; no --max-update: the schedule is in epochs
    optimisation = ["--lr", f"{lla.lr:g}", "--lr-scheduler", "fixed", "--clip-norm", "0"]
    return {"optimisation": optimisation, "batching": [], "schedule": [], "after": cmd}


def patience(given: Optional[int], validate_every: Optional[int]) -> Optional[int]:
    """--patience where given and the task validates (fairseq counts every validation, those of the Lexicon Unit
    epochs too: invocation.check_options refuses fewer than N)."""
    if not given or validate_every is None:
        return None
    return given


@dataclass(frozen=True)
class Resumable:
    """Whether an unfinished lla run in OUT can resume from its checkpoint_last.pt (execute.RunSpec.resumable).
    lla_translation refuses to resume in epochs 1..N+1 with the Lexicon Unit selection (fairseq keeps no task state
    in a checkpoint: the units of the earlier epochs are gone), so such a run starts again. The epoch is the last one
    fairseq logged as saved (a checkpoint written just before an interruption, not yet logged, is a later epoch:
    never a wrong resume)."""

    lla: LlaSettings

    def __call__(self, out: str) -> bool:
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


def selection(lla: LlaSettings, out: str) -> dict:
    """What lla_translation selected, from OUT/lla_selection.json (the task writes it after each validation): the
    epoch of checkpoint_best.pt (the last epoch whose lla_selection is finite: the first epoch with the best
    validation score after N) with the score curve of the epochs after N, and the Lexicon Unit used from epoch N+1
    with its validation BCE curve of epochs 1..N. Written to OUT/selection.json by with_selection."""
    path, n = f"{out}/{SELECTION_FILE}", lla.lexicon_epochs
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
        raise RecipeError(f"{path}: no validation {metric} at epoch {epoch}, the last with a finite {SELECTION_METRIC}")
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


def with_selection(lla: LlaSettings, out: str, prefix: str, training: Dict[str, object]) -> Dict[str, object]:
    """The training summary of an lla run evaluated at checkpoint_best.pt, with what lla_translation selected (its
    lla_selection.json; also written to OUT/selection.json): the update count of the summary is the whole run's (to
    the last epoch or the early stop), the evaluated model is checkpoint_best.pt's. ``prefix`` starts the line said
    ("[1/2]    lla seed 1")."""
    chosen = selection(lla, out)
    write_json(f"{out}/selection.json", chosen)
    unit = chosen["lexicon_unit"]
    say(
        f"{prefix}: Lexicon Unit of epoch {unit['epoch']} (lowest validation BCE, "
        f"{unit[LEXICON_UNIT_METRIC]:g}); best validation {chosen['metric']} "
        f"{chosen[chosen['metric']]:g} first at epoch {chosen['epoch']}"
    )
    where = f"epoch {chosen['epoch']}"
    training = dict(training)
    if chosen["epoch"] < chosen["last_epoch"]:
        training["selected_updates"] = chosen["updates"]
        where += f" (update {training['selected_updates']})"
    training["text"] += f"; {where} of {chosen['last_epoch']} evaluated"
    training["selected_epoch"] = chosen["epoch"]
    return training


# -- damage (Thrush 2020, Table 2) ---------------------------------------------------------------------------------
def damage_conditions(damage: str, adversary: bool) -> List[str]:
    """--damage's conditions for a row (``adversary``: its model has the adversary unit)."""
    conds = (
        [c.strip() for c in damage.split(",") if c.strip()]
        if damage != "auto"
        else ["none", "lstm", "lexicon", "adversary"]
    )
    # the adversary group exists only in the model with an adversary
    return [c for c in conds if adversary or "adversary" not in c.split("+")]


def damage_examples(examples: Sequence[str], bin_dir: str) -> List[str]:
    """The task's Table 2 sentence(s) whose words are all in BIN_DIR's source dictionary (damage.py refuses
    others)."""
    path = bin_dir + "/dict.src.txt"
    if not os.path.isfile(path):
        return list(examples)
    with open(path, encoding="utf-8") as f:
        vocab = {line.split()[0] for line in f if line.strip()}
    return [e for e in examples if all(w in vocab for w in e.split())]


def run_damage(cmd: List[str], checkpoint: str, out: str, model: str, seed: int, index: str, force: bool) -> None:
    """tools/damage.py (``cmd``) on the evaluated checkpoint of (model, seed): OUT/damage.json (its JSON, the command
    and the time), unless there with the same command."""
    with ownership.writing(out):
        path = f"{out}/damage.json"
        if os.path.isfile(path) and not force and not differences(read_json(path), {"command": show(cmd)}):
            return
        if not os.path.isfile(checkpoint):
            why = "removed by --keep-checkpoints none?"
            say(f"{index} {model} seed {seed}: no {checkpoint} to damage ({why}); skipped")
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
