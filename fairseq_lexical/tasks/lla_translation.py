"""`lla_translation`: Thrush (2020)'s training of the LLA-LSTM (`lla_lstm`) as one fairseq-train call.

    epochs 1..N   the Lexicon Unit alone (N: the model's --lexicon-unit-epochs), batches of --lexicon-unit-batch-size
                  sentences; the unit with the lowest validation BCE (`aux_lexicon`) is kept, the later epoch among
                  equal logged values
    epoch N+1     that unit is loaded into the model, which freezes it from then on (`LLALSTMModel.set_epoch`)
    epochs N+1..  the other modules with --batch-size; each validation logs `lla_selection`, the validation
                  --lla-selection-metric where it beats every earlier epoch of this phase and -inf elsewhere, so that
                  fairseq's checkpoint_best.pt (--best-checkpoint-metric lla_selection
                  --maximize-best-checkpoint-metric)
                  is the FIRST epoch with the best score (fairseq alone keeps the last of tied epochs)

The schedule lives in the task, as in fairseq's translation_moe and latent_depth examples: `begin_epoch` tells the
model the epoch (the class says so with `sets_model_epoch`, so that the model, which imports no task, installs no
hook of its own), `get_batch_iterator` gives each phase its batch size, `post_validate` (fairseq's hook after each
validation) selects. After each validation the task writes what it measured and selected to
`--save-dir`/lla_selection.json (``SelectionRecord``), which the recipes read instead of the log. The result equals
the two calls of docs/lla.md with the selected unit put into checkpoint_last.pt between them.
"""

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from torch import Tensor

from fairseq import metrics
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import register_task
from omegaconf import II

from ..models.lla_lstm import LLALSTMModel
from .lexical_translation import LexicalTranslationConfig, LexicalTranslationTask

logger = logging.getLogger(__name__)

# The Lexicon Unit's BCE as lexical_cross_entropy logs it (the model's auxiliary loss "lexicon").
LEXICON_UNIT_METRIC = "aux_lexicon"
# The metric this task logs at each validation, for --best-checkpoint-metric.
SELECTION_METRIC = "lla_selection"
NOT_SELECTABLE = float("-inf")
# What the task selected, beside the checkpoints (SelectionRecord).
SELECTION_FILE = "lla_selection.json"

LEXICON_UNIT_SELECTION = ChoiceEnum(["valid_bce", "last"])


@dataclass
class LLATranslationConfig(LexicalTranslationConfig):
    lexicon_unit_batch_size: Optional[int] = field(
        default=None,
        metadata={
            "help": "sentences per batch, training and validation, in the Lexicon Unit epochs 1..N (the model's "
            "--lexicon-unit-epochs; Thrush: 1); the later epochs use --batch-size. Each phase then gets its "
            "own batch iterator, started at its first epoch, as two fairseq-train calls would. Default: "
            "--batch-size throughout (one iterator)"
        },
    )
    lexicon_unit_selection: LEXICON_UNIT_SELECTION = field(
        default="valid_bce",
        metadata={
            "help": "the Lexicon Unit the epochs after N use: 'valid_bce' the one with the lowest validation BCE "
            f"({LEXICON_UNIT_METRIC}; among equal logged values the later epoch; Thrush's), 'last' that of epoch N"
        },
    )
    lla_selection_metric: str = field(
        default="exact_match",
        metadata={
            "help": f"validation metric of the model selection in the epochs after N, logged as {SELECTION_METRIC} "
            "where it beats every earlier such epoch: with --best-checkpoint-metric lla_selection "
            "--maximize-best-checkpoint-metric, checkpoint_best.pt is the first epoch with the best score "
            "(Thrush's model selection; 'bleu' needs --eval-bleu)"
        },
    )
    lla_selection_minimize: bool = field(
        default=False,
        metadata={
            "help": f"lower --lla-selection-metric is better (e.g. loss); {SELECTION_METRIC} is then its negation"
        },
    )
    save_dir: Optional[str] = II("checkpoint.save_dir")  # where SELECTION_FILE goes


class SelectionRecord:
    """``--save-dir``/lla_selection.json: per validation epoch the --lla-selection-metric and the logged
    lla_selection, with the update count; per Lexicon Unit epoch its validation BCE, and the unit used from epoch
    N+1. Rewritten whole (temporary file, rename) after each validation by the first worker; a resumed run keeps
    what the file holds (fairseq keeps no task state in a checkpoint)."""

    def __init__(self, save_dir: Optional[str], cfg, lexicon_unit_epochs: int):
        usable = isinstance(save_dir, str) and save_dir and not save_dir.startswith("${")  # built outside training
        self.path = os.path.join(save_dir, SELECTION_FILE) if usable else None
        self.data = {
            "metric": cfg.lla_selection_metric,
            "minimize": bool(cfg.lla_selection_minimize),
            "lexicon_unit_epochs": lexicon_unit_epochs,
            "lexicon_unit_selection": str(cfg.lexicon_unit_selection),
            "lexicon_unit": {"metric": LEXICON_UNIT_METRIC, "epoch": None, LEXICON_UNIT_METRIC: None, "curve": {}},
            "validations": {},
        }

    def resume(self) -> None:
        if self.path and os.path.isfile(self.path):
            with open(self.path) as f:
                self.data = json.load(f)

    def lexicon_unit(self, epoch: int, bce: Optional[float]) -> None:
        self.data["lexicon_unit"].update({"epoch": epoch, LEXICON_UNIT_METRIC: None if bce is None else float(bce)})
        self.write()

    def validation(self, epoch: int, stats, bce: Optional[float] = None) -> None:
        def number(value):
            return None if value is None else float(value)

        self.data["validations"][str(epoch)] = {
            "score": number(stats.get(self.data["metric"])),
            SELECTION_METRIC: number(stats.get(SELECTION_METRIC)),
            "num_updates": None if stats.get("num_updates") is None else int(stats["num_updates"]),
        }
        if bce is not None:
            self.data["lexicon_unit"]["curve"][str(epoch)] = float(bce)
        self.write()

    def write(self) -> None:
        if self.path is None or distributed_utils.get_global_rank() != 0:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path + ".tmp", "w") as f:  # -inf is written as -Infinity (Python's json reads it back)
            json.dump(self.data, f, indent=1)
        os.replace(self.path + ".tmp", self.path)


@register_task("lla_translation", dataclass=LLATranslationConfig)
class LLATranslationTask(LexicalTranslationTask):
    """The plugin's translation task (its keep-best beam search) plus the LLA schedule and Thrush's model selection
    (module docstring)."""

    # begin_epoch tells the model the epoch (model.set_epoch): the model leaves this task's begin_epoch alone
    # (models/lla_lstm.py: TASK_SETS_MODEL_EPOCH)
    sets_model_epoch = True

    def __init__(self, cfg: LLATranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.lexicon_unit_batch_size is not None and cfg.lexicon_unit_batch_size < 1:
            raise ValueError(f"--lexicon-unit-batch-size must be >= 1, got {cfg.lexicon_unit_batch_size}")
        self.lexicon_unit_epochs = 0  # N, the model's --lexicon-unit-epochs (build_model)
        self.record = SelectionRecord(cfg.save_dir, cfg, 0)  # made again with N in build_model
        self.epoch: Optional[int] = None  # the epoch being trained or validated
        self.validating = False
        self.validated_epoch: Optional[int] = None
        self.best_unit: Optional[Tuple[int, float, Dict[str, Tensor]]] = None  # (epoch, BCE, parameters)
        self.best_score: Optional[float] = None  # best oriented selection score after epoch N
        self.iterator_phase = {}  # dataset -> Lexicon Unit phase (bool) of its cached epoch iterator

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if not isinstance(model, LLALSTMModel):
            raise ValueError(
                f"--task lla_translation trains the LLA-LSTM (--arch lla_lstm or lla_lstm_small), "
                f"got --arch {getattr(cfg, 'arch', type(model).__name__)}"
            )
        self.lexicon_unit_epochs = model.lexicon_unit_epochs
        self.record = SelectionRecord(self.cfg.save_dir, self.cfg, self.lexicon_unit_epochs)
        return model

    def in_lexicon_unit_phase(self, epoch: Optional[int]) -> bool:
        return epoch is not None and epoch <= self.lexicon_unit_epochs

    # -- batch sizes ---------------------------------------------------------------------------------------------

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None, **kwargs):
        if self.cfg.lexicon_unit_batch_size is not None:
            # the trainer asks for epoch e's training iterator before begin_epoch(e), and for validation ones with
            # epoch=1 (after begin_valid_epoch)
            lexicon_phase = self.in_lexicon_unit_phase(max(kwargs.get("epoch", 1), self.epoch or 0))
            if lexicon_phase:
                max_sentences = self.cfg.lexicon_unit_batch_size
            if self.iterator_phase.get(dataset, lexicon_phase) != lexicon_phase:
                self.dataset_to_epoch_iter.pop(dataset, None)  # fairseq reuses one iterator across epochs
            self.iterator_phase[dataset] = lexicon_phase
        return super().get_batch_iterator(dataset, max_tokens=max_tokens, max_sentences=max_sentences, **kwargs)

    # -- the schedule --------------------------------------------------------------------------------------------

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        resumed = self.epoch is None and epoch > 1
        self.epoch, self.validating = epoch, False
        n, select = self.lexicon_unit_epochs, self.cfg.lexicon_unit_selection == "valid_bce"
        if resumed and select and epoch <= n + 1:
            # fairseq restores no task state when it resumes a training run
            raise RuntimeError(
                f"lla_translation: resumed at epoch {epoch}, but the Lexicon Unit selection of epochs "
                f"1-{n} (--lexicon-unit-selection valid_bce) is not in the checkpoint; train again from "
                f"epoch 1 (another --save-dir) or use --lexicon-unit-selection last"
            )
        if resumed and epoch > n + 1:
            # fairseq restored its best lla_selection, which is the best score so far (with it as the
            # --best-checkpoint-metric)
            from fairseq import checkpoint_utils

            best = getattr(checkpoint_utils.save_checkpoint, "best", None)
            self.best_score = best if best is not None and math.isfinite(best) else None
            self.record.resume()
        if epoch == n + 1 and select and n > 0:
            if self.best_unit is None:
                raise RuntimeError(
                    f"lla_translation: no validation {LEXICON_UNIT_METRIC} in epochs 1-{n} to select the "
                    f"Lexicon Unit (--lexicon-unit-selection valid_bce needs validation every epoch; "
                    f"--validate-interval 1, no --disable-validation)"
                )
            unit_epoch, bce, state = self.best_unit
            model.encoder.lexicon_unit.load_state_dict(state)
            logger.info(
                f"lla_translation: epoch {epoch}: the Lexicon Unit of epoch {unit_epoch} (lowest validation "
                f"{LEXICON_UNIT_METRIC}, {bce:g}) is used from now on"
            )
            self.best_unit = None
            self.record.lexicon_unit(unit_epoch, bce)
        elif epoch == n + 1 and n > 0:  # --lexicon-unit-selection last
            self.record.lexicon_unit(n, self.record.data["lexicon_unit"]["curve"].get(str(n)))
        model.set_epoch(epoch)

    # -- model selection -----------------------------------------------------------------------------------------

    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        self.epoch, self.validating = epoch, True

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if self.validating:
            metrics.log_derived(SELECTION_METRIC, self._selection_value_of, priority=100)

    def _selection_value_of(self, meters) -> float:
        name = self.cfg.lla_selection_metric
        return self.selection_value(meters.get_smoothed_value(name) if name in meters else None)

    def selection_value(self, score: Optional[float]) -> float:
        """The logged lla_selection: the score (negated with --lla-selection-minimize) where it is strictly better
        than every earlier epoch after N, else -inf, so that fairseq's `>=` keeps the first of tied epochs."""
        if score is None or self.in_lexicon_unit_phase(self.epoch) or math.isnan(score):
            return NOT_SELECTABLE
        oriented = -score if self.cfg.lla_selection_minimize else score
        return oriented if self.best_score is None or oriented > self.best_score else NOT_SELECTABLE

    def post_validate(self, model, stats, agg):
        """fairseq's hook after each validation subset (stats as logged; checkpoint_best follows the first subset)."""
        if self.validated_epoch == self.epoch:
            stats[SELECTION_METRIC] = NOT_SELECTABLE
            return
        self.validated_epoch = self.epoch
        metric = self.cfg.lla_selection_metric
        if metric not in stats:
            raise ValueError(
                f"--lla-selection-metric {metric} is not among the validation metrics "
                f"({', '.join(sorted(stats))}); 'bleu' needs --eval-bleu"
            )
        if self.in_lexicon_unit_phase(self.epoch):
            if self.cfg.lexicon_unit_selection == "valid_bce":
                if LEXICON_UNIT_METRIC not in stats:
                    raise ValueError(
                        f"no validation {LEXICON_UNIT_METRIC} to select the Lexicon Unit: "
                        f"use --criterion lexical_cross_entropy"
                    )
                bce = stats[LEXICON_UNIT_METRIC]
                if self.best_unit is None or bce <= self.best_unit[1]:  # the later of equal values
                    state = {k: v.detach().clone() for k, v in model.encoder.lexicon_unit.state_dict().items()}
                    self.best_unit = (self.epoch, bce, state)
            stats[SELECTION_METRIC] = NOT_SELECTABLE
            self.record.validation(self.epoch, stats, stats.get(LEXICON_UNIT_METRIC))
            return
        value = self.selection_value(stats[metric])
        if value != NOT_SELECTABLE:
            self.best_score = value
        stats[SELECTION_METRIC] = value
        self.record.validation(self.epoch, stats)
