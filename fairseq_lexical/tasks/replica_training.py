"""`--replica-seeds 1,2,3`: one model per seed trained in one process, each the run `--seed s` makes alone.

The model is the replicas' stacked model (``modules/replicas.py``), built from each seed as a single run builds it.
What fairseq's trainer does once for one model is done here once per replica:

- batches: each replica's own fairseq iterator (its seed's shuffling, or the authors' random batches), their
  samples merged row-wise into one (``merge_replica_samples``; a replica's missing rows are padding rows with no
  loss), an epoch the first replica's;
- loss normalisation: each replica's gradient divided by its own sample size once the update's batches are summed
  (``normalise_replica_gradients``; the criterion returns the summed loss and a sample size of 1, --update-freq
  included);
- gradient clipping at `--clip-norm` by each replica's own norm, in place of the optimizer's global clipping; a
  replica with an inf/nan gradient skips that update (``optim/replica_adam.py``);
- Adam per replica, with its own step count;
- validation: each replica's loss (``loss_s{seed}``, ``nll_loss_s{seed}``, ``exact_match_s{seed}``), its best so
  far, `--patience` counted per replica (a replica that stops is frozen: its updates are skipped); fairseq's
  `--best-checkpoint-metric` value is then the mean of the replicas' bests so far, which improves exactly when one
  replica improves, so fairseq's own early stopping ends the process when every replica has stopped;
- checkpoints: after each checkpoint fairseq writes (the stacked model's, for resuming), each replica's
  ``SAVE_DIR/seed{s}/checkpoint_last.pt`` and, where its validation improved, ``checkpoint_best.pt``: ordinary
  single-model checkpoints (fairseq-generate loads them as any other).

Single-process, fp32 (or fp64) training only: a clear error names what else was asked for.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from argparse import Namespace
from typing import Callable, List, Optional, Sequence

import torch
from omegaconf import OmegaConf

from fairseq import checkpoint_utils, metrics, utils
from fairseq.data import iterators

from ..modules.replicas import refuse, refuse_stacked_replicas, replica_state_dict, stack_replicas
from ..optim.replica_adam import ReplicaAdam, clip_replica_grad_norms_, replica_optimizer_state

logger = logging.getLogger(__name__)

OPTION = "--replica-seeds"
# the validation metrics kept per replica (the criterion's, by replica)
REPLICA_METRICS = ("loss", "nll_loss", "exact_match")
SUPPORTED_OPTIMIZERS = ("adam", "adam_foreach")


def parse_replica_seeds(spec: Optional[str]) -> Optional[List[int]]:
    """The seeds of `--replica-seeds` ("1,2,3"), or None; a ValueError naming the option."""
    if spec is None or str(spec).strip() == "":
        return None
    try:
        seeds = [int(part) for part in str(spec).split(",")]
    except ValueError:
        seeds = None
    if seeds is None:
        refuse(f"{OPTION} {spec!r}: give comma-separated integer seeds, e.g. 1,2,3")
    if len(set(seeds)) != len(seeds):
        refuse(f"{OPTION} {spec!r}: a seed is repeated")
    return seeds


def replica_folder(save_dir: str, seed: int, pattern: Optional[str] = None) -> str:
    """Where replica ``seed``'s checkpoints go: ``pattern`` (`--replica-dirs`, with {seed}), else SAVE_DIR/seed{s}."""
    return pattern.format(seed=seed) if pattern else os.path.join(save_dir, f"seed{seed}")


def check_replica_options(args) -> None:
    """What replicas cannot train with, as one ValueError naming the option."""

    def value(name, default=None):
        return getattr(args, name, default)

    refused = [
        (value("fp16") or value("memory_efficient_fp16"), "--fp16"),
        (value("bf16") or value("memory_efficient_bf16"), "--bf16"),
        (value("amp"), "--amp"),
        ((value("distributed_world_size", 1) or 1) > 1, "--distributed-world-size > 1"),
        (value("ema") or value("store_ema"), "--store-ema"),
    ]
    for asked, option in refused:
        if asked:
            refuse(f"{OPTION} does not support {option}: train these runs one by one")
    optimizer = value("optimizer")
    if optimizer is not None and optimizer not in SUPPORTED_OPTIMIZERS:
        refuse(f"{OPTION} needs --optimizer adam or adam_foreach (Adam per replica), got {optimizer}")
    metric = value("best_checkpoint_metric", "loss")
    if metric not in REPLICA_METRICS:
        refuse(
            f"{OPTION}: --best-checkpoint-metric {metric} is not kept per replica; use one of "
            f"{', '.join(REPLICA_METRICS)}"
        )


def merge_replica_samples(samples: Sequence[dict], pad: int, eos: int, left_pad_source: bool, left_pad_target: bool):
    """The replicas' samples (fairseq's translation batches, replica r's at index r) as one batch of R x B rows,
    replica-major: each padded to the longest batch's rows (padding rows: a source of one EOS, no target) and to
    the longest source and target.

    Returns:
        fairseq's batch plus ``replicas``: {"ntokens", "nsentences": R each (float)}.
    """
    rows = max(s["target"].size(0) for s in samples)
    src_len = max(s["net_input"]["src_tokens"].size(1) for s in samples)
    tgt_len = max(s["target"].size(1) for s in samples)

    def fit(tokens, length, left, first_token):
        out = tokens.new_full((rows, length), pad)
        bsz, width = tokens.shape
        if left:
            out[:bsz, length - width :] = tokens
        else:
            out[:bsz, :width] = tokens
        if first_token is not None and bsz < rows:  # a padding row's one token
            out[bsz:, length - 1 if left else 0] = first_token
        return out

    parts = {"src_tokens": [], "src_lengths": [], "prev_output_tokens": [], "target": [], "id": []}
    for s in samples:
        net = s["net_input"]
        bsz = s["target"].size(0)
        parts["src_tokens"].append(fit(net["src_tokens"], src_len, left_pad_source, eos))
        parts["prev_output_tokens"].append(fit(net["prev_output_tokens"], tgt_len, left_pad_target, eos))
        parts["target"].append(fit(s["target"], tgt_len, left_pad_target, None))
        lengths = net["src_lengths"].new_ones(rows)
        lengths[:bsz] = net["src_lengths"]
        parts["src_lengths"].append(lengths)
        ids = s["id"].new_full((rows,), -1)
        ids[:bsz] = s["id"]
        parts["id"].append(ids)
    merged = {name: torch.cat(values) for name, values in parts.items()}
    ntokens = [float(s["ntokens"]) for s in samples]
    nsentences = [float(s["nsentences"]) for s in samples]
    return {
        "id": merged["id"],
        "nsentences": int(sum(nsentences)),
        "ntokens": int(sum(ntokens)),
        "net_input": {
            "src_tokens": merged["src_tokens"],
            "src_lengths": merged["src_lengths"],
            "prev_output_tokens": merged["prev_output_tokens"],
        },
        "target": merged["target"],
        "replicas": {
            "ntokens": torch.tensor(ntokens, device=merged["target"].device),
            "nsentences": torch.tensor(nsentences, device=merged["target"].device),
        },
    }


class ReplicaEpochBatchIterator(iterators.EpochBatchIterating):
    """fairseq's epoch iterator over the replicas' merged batches: each replica's own EpochBatchIterator drawn one
    batch per update. An epoch is the first replica's; a replica whose epoch ends earlier starts its next one at
    once, one whose epoch is longer carries the rest into the next epoch: each replica's batches are, in order,
    those of its run alone. The state (for resuming) is the first replica's plus every replica's."""

    def __init__(self, replicas: List[iterators.EpochBatchIterator], merge: Callable[[list], dict], progress=None):
        self.replicas = replicas
        self.merge = merge
        self.progress = progress  # the task's per-replica validation state, saved and resumed with the batches
        self._current: List[Optional[iterators.CountingIterator]] = [None] * len(replicas)
        self._options = {}

    @property
    def epoch(self) -> int:
        return self.replicas[0].epoch

    @property
    def next_epoch_idx(self):
        return self.replicas[0].next_epoch_idx

    def __len__(self) -> int:
        return len(self.replicas[0])

    @property
    def n(self) -> int:
        return self.replicas[0].n

    @property
    def first_batch(self):
        firsts = [itr.first_batch for itr in self.replicas]
        return "DUMMY" if any(isinstance(f, str) for f in firsts) else self.merge(firsts)

    def next_epoch_itr(self, shuffle=True, fix_batches_to_gpus=False, set_dataset_epoch=True):
        self._options = dict(shuffle=shuffle, fix_batches_to_gpus=fix_batches_to_gpus)
        lead = self.replicas[0].next_epoch_itr(set_dataset_epoch=set_dataset_epoch, **self._options)
        self._current[0] = lead
        return iterators.CountingIterator(self._merged(lead), start=lead.n, total=len(lead))

    def _merged(self, lead):
        for sample in lead:
            batch = [sample]
            for r in range(1, len(self.replicas)):
                itr = self._current[r]
                if itr is None or not itr.has_next():
                    itr = self._current[r] = self.replicas[r].next_epoch_itr(set_dataset_epoch=False, **self._options)
                batch.append(next(itr))
            yield self.merge(batch)

    def end_of_epoch(self) -> bool:
        return self.replicas[0].end_of_epoch()

    @property
    def iterations_in_epoch(self) -> int:
        return self.replicas[0].iterations_in_epoch

    def state_dict(self):
        state = dict(self.replicas[0].state_dict())
        state["replicas"] = [itr.state_dict() for itr in self.replicas]
        if self.progress is not None:
            state["replica_progress"] = self.progress.replica_state()
        return state

    def load_state_dict(self, state_dict):
        for itr, state in zip(self.replicas, state_dict.get("replicas") or [state_dict] * len(self.replicas)):
            itr.load_state_dict(state)
        self._current = [None] * len(self.replicas)
        if self.progress is not None and "replica_progress" in state_dict:
            self.progress.load_replica_state(state_dict["replica_progress"])


def _install_checkpoint_hook() -> None:
    """After fairseq's Trainer writes a checkpoint, its task writes the replicas' (``write_replica_checkpoints``):
    the trainer has no other hook at that point, and the replicas' checkpoints are built from what it holds."""
    from fairseq.trainer import Trainer

    if getattr(Trainer.save_checkpoint, "replica_hook", False):
        return
    original = Trainer.save_checkpoint

    def save_checkpoint(self, filename, extra_state):
        path = original(self, filename, extra_state)
        writer = getattr(self.task, "write_replica_checkpoints", None)
        if path is not None and writer is not None:
            writer(self, extra_state)
        return path

    save_checkpoint.replica_hook = True
    Trainer.save_checkpoint = save_checkpoint


class ReplicaTraining:
    """Mixin of a translation task (lexical_translation): `--replica-seeds` (module docstring). Without the option
    every method is the task's own."""

    replica_seeds: Optional[List[int]] = None

    def setup_replicas(self, spec: Optional[str], dirs: Optional[str] = None) -> None:
        self.replica_seeds = parse_replica_seeds(spec)
        if dirs and "{seed}" not in dirs:
            refuse(f"--replica-dirs {dirs!r}: put {{seed}} where each replica's seed goes")
        self.replica_dirs = dirs
        self._replica_args = None
        self._replica_iterators = {}
        self._clip_attached = False
        self._sizes, self._batches = None, 0  # the update's per-replica sample sizes so far
        self._frozen = [False] * len(self.replica_seeds or ())
        self._finite = None
        self._best: List[Optional[float]] = [None] * len(self.replica_seeds or ())
        self._bad_runs = [0] * len(self.replica_seeds or ())
        self._improved = [False] * len(self.replica_seeds or ())
        self._last_valid: List[Optional[float]] = [None] * len(self.replica_seeds or ())

    # -- the model -------------------------------------------------------------------------------------------------
    def build_replicated_model(self, args, build_one: Callable[[object], torch.nn.Module], from_checkpoint=False):
        """The replicas' stacked model: ``build_one(args)`` under each seed (torch's seed set as fairseq-train sets
        it before building a model)."""
        if from_checkpoint:
            refuse_stacked_replicas(args)
        check_replica_options(args)
        if getattr(self.cfg, "eval_bleu", False):
            refuse(f"{OPTION} does not support --eval-bleu (a stacked model does not decode)")
        models = []
        # Each replica is built from the arguments as they came (a build fills in defaults and marks what the
        # checkpoint will hold, e.g. the lexicon); the arguments keep the last build's marks, as a single run's do.
        if not isinstance(args, Namespace):
            refuse(f"{OPTION}: the model's arguments are not fairseq-train's command line's ({type(args)})")
        before = dict(vars(args))
        for seed in self.replica_seeds:
            utils.set_torch_seed(seed)
            vars(args).clear()
            vars(args).update(before, seed=seed, replica_seeds=None)
            model = build_one(args)
            if not getattr(model, "supports_replicas", False):
                refuse(f"{OPTION}: the architecture {getattr(args, 'arch', '?')} has no replica form")
            models.append(model)
        args.seed, args.replica_seeds = before.get("seed"), before.get("replica_seeds")
        utils.set_torch_seed(self.replica_seeds[0])
        model = stack_replicas(models)
        model.replica_seeds = list(self.replica_seeds)
        self._replica_args = args
        _install_checkpoint_hook()
        logger.info(
            "%s: %d replicas (seeds %s) in one model",
            OPTION,
            len(self.replica_seeds),
            ",".join(map(str, self.replica_seeds)),
        )
        return model

    # -- batches ---------------------------------------------------------------------------------------------------
    def merge_samples(self, samples: Sequence[dict]) -> dict:
        return merge_replica_samples(
            samples,
            self.source_dictionary.pad(),
            self.source_dictionary.eos(),
            bool(self.cfg.left_pad_source),
            bool(self.cfg.left_pad_target),
        )

    def replica_batch_iterator(self, dataset, single: Callable[..., iterators.EpochBatchIterator], **kwargs):
        """The training set's ReplicaEpochBatchIterator (kept, as fairseq keeps its iterator: a replica's place in
        its epoch survives the epoch's end); ``single(dataset, seed=..., **kwargs)`` makes one replica's."""
        kept = self._replica_iterators.get(id(dataset))
        if kept is not None and not kwargs.get("disable_iterator_cache", False):
            return kept
        kwargs = dict(kwargs, disable_iterator_cache=True)
        replicas = [single(dataset, **dict(kwargs, seed=seed)) for seed in self.replica_seeds]
        itr = ReplicaEpochBatchIterator(replicas, self.merge_samples, progress=self)
        self._replica_iterators[id(dataset)] = itr
        return itr

    # -- training --------------------------------------------------------------------------------------------------
    def replica_train_step(self, optimizer) -> None:
        """Before a training step (once): the optimizer's clipping is each replica's, its update ReplicaAdam's
        (which takes over the state a resumed run loaded)."""
        if self._clip_attached:
            return
        task = self
        optimizer.optimizer = ReplicaAdam.replacing(optimizer.optimizer, len(self.replica_seeds))

        def clip_grad_norm(max_norm, aggregate_norm_fn=None):
            task.normalise_replica_gradients(optimizer.params)
            norms, finite = clip_replica_grad_norms_(optimizer.params, max_norm, len(task.replica_seeds))
            task._finite = finite.tolist()
            for seed, ok in zip(task.replica_seeds, task._finite):
                if not ok:
                    logger.warning("replica seed %d: inf/nan gradient, its update is skipped", seed)
            # what fairseq checks (finite) and logs (gnorm): the finite replicas' mean norm
            kept = torch.where(finite, norms, 0.0)
            return kept.sum() / finite.sum().clamp(min=1)

        optimizer.clip_grad_norm = clip_grad_norm
        self._clip_attached = True

    def count_replica_batch(self, logging_output: dict) -> None:
        """A training batch's per-replica sample sizes (the criterion's), summed over the update's batches."""
        sizes = logging_output["replica_sample_size"].detach().double()
        self._sizes = sizes if self._sizes is None else self._sizes + sizes
        self._batches += 1

    def normalise_replica_gradients(self, params) -> None:
        """Each replica's summed gradient divided by its own sample size over the update (fairseq's trainer has
        divided every gradient by the number of batches, the sample size the criterion returns being 1)."""
        if self._sizes is None:
            return
        scale = self._batches / self._sizes.clamp(min=1)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale.to(p.grad).view((-1,) + (1,) * (p.grad.dim() - 1)))
        self._sizes, self._batches = None, 0

    def replica_optimizer_step(self, optimizer) -> None:
        """The replicas' update: those with a finite gradient that have not stopped."""
        finite = self._finite or [True] * len(self.replica_seeds)
        optimizer.optimizer.active = [ok and not frozen for ok, frozen in zip(finite, self._frozen)]
        optimizer.step()
        self._finite = None

    # -- validation ------------------------------------------------------------------------------------------------
    def log_replica_metrics(self, logging_outputs) -> None:
        """Each replica's loss, nll_loss and exact_match (``{name}_s{seed}``) from the criterion's per-replica sums."""
        if not any("replica_loss" in log for log in logging_outputs):
            return

        def total(key):
            return sum(log[key] for log in logging_outputs if key in log)

        loss, size = total("replica_loss"), total("replica_sample_size")
        nll, ntokens = total("replica_nll_loss"), total("replica_ntokens")
        exact = total("replica_exact") if any("replica_exact" in log for log in logging_outputs) else None
        nsentences = total("replica_nsentences")
        for r, seed in enumerate(self.replica_seeds):
            metrics.log_scalar(f"loss_s{seed}", loss[r] / size[r].clamp(min=1) / math.log(2), size[r], round=3)
            metrics.log_scalar(f"nll_loss_s{seed}", nll[r] / ntokens[r].clamp(min=1) / math.log(2), ntokens[r], round=3)
            if exact is not None:
                metrics.log_scalar(
                    f"exact_match_s{seed}", exact[r] / nsentences[r].clamp(min=1), nsentences[r], round=4
                )

    def replica_post_validate(self, stats: dict) -> None:
        """Each replica's best and `--patience` from this validation's ``stats``; fairseq's metric in ``stats``
        becomes the mean of the replicas' bests (module docstring)."""
        args = self._replica_args
        metric = getattr(args, "best_checkpoint_metric", "loss")
        maximize = bool(getattr(args, "maximize_best_checkpoint_metric", False))
        patience = int(getattr(args, "patience", -1) or -1)
        for r, seed in enumerate(self.replica_seeds):
            value = stats.get(f"{metric}_s{seed}")
            if value is None:
                continue
            value = float(value)
            self._last_valid[r] = value
            if self._frozen[r]:
                self._improved[r] = False
                continue
            best = self._best[r]
            better = best is None or (value > best if maximize else value < best)
            self._improved[r] = better
            if better:
                self._best[r], self._bad_runs[r] = value, 0
            else:
                self._bad_runs[r] += 1
                if patience > 0 and self._bad_runs[r] >= patience:
                    self._frozen[r] = True
                    logger.info("replica seed %d: no better %s for %d validations, stopped", seed, metric, patience)
        bests = [b for b in self._best if b is not None]
        if bests:
            stats[metric] = round(sum(bests) / len(bests), 3)
            best_so_far = getattr(checkpoint_utils.save_checkpoint, "best", None)  # (fairseq's best_* line)
            choose = max if maximize else min
            stats[f"best_{metric}"] = stats[metric] if best_so_far is None else choose(best_so_far, stats[metric])
        stats["replicas_training"] = sum(not f for f in self._frozen)

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def write_replica_checkpoints(self, trainer, extra_state: dict) -> None:
        """Each replica's checkpoint_last.pt (and checkpoint_best.pt where its last validation improved) in
        SAVE_DIR/seed{s}/: the checkpoint its run alone would have written."""
        model = trainer.get_model()
        cfg = OmegaConf.to_container(trainer.cfg, resolve=True, enum_to_str=True)
        save_dir = trainer.cfg.checkpoint.save_dir
        optimizer_state = trainer.optimizer.state_dict()
        iterator_states = (extra_state.get("train_iterator") or {}).get("replicas")
        for r, seed in enumerate(self.replica_seeds):
            folder = replica_folder(save_dir, seed, self.replica_dirs)
            os.makedirs(folder, exist_ok=True)
            state = {
                "args": None,
                "cfg": _single_cfg(cfg, seed, folder),
                "model": replica_state_dict(model, r),
                "criterion": None,
                "optimizer_history": [
                    {
                        "criterion_name": trainer.get_criterion().__class__.__name__,
                        "optimizer_name": trainer.optimizer.__class__.__name__,
                        "lr_scheduler_state": trainer.lr_scheduler.state_dict(),
                        "num_updates": trainer.get_num_updates(),
                    }
                ],
                "task_state": {},
                "extra_state": {
                    "metrics": {},
                    "previous_training_time": trainer.cumulative_training_time(),
                    "replica_of": {"seeds": list(self.replica_seeds), "index": r},
                },
                "last_optimizer_state": replica_optimizer_state(optimizer_state, r),
            }
            if iterator_states is not None:
                state["extra_state"]["train_iterator"] = iterator_states[r]
            if self._last_valid[r] is not None:
                state["extra_state"]["val_loss"] = self._last_valid[r]
            state = utils.move_to_cpu(state)
            names = ["checkpoint_last.pt"] + (["checkpoint_best.pt"] if self._improved[r] else [])
            for name in names:
                checkpoint_utils.torch_persistent_save(state, os.path.join(folder, name))
            self._improved[r] = False

    def replica_state(self) -> dict:
        return {
            "replica_seeds": list(self.replica_seeds),
            "best": list(self._best),
            "bad_runs": list(self._bad_runs),
            "frozen": list(self._frozen),
        }

    def load_replica_state(self, state: dict) -> None:
        if state.get("replica_seeds") != list(self.replica_seeds):
            refuse(
                f"{OPTION} {','.join(map(str, self.replica_seeds))}: the checkpoint being resumed holds the replicas "
                f"{','.join(map(str, state.get('replica_seeds') or []))}"
            )
        self._best, self._bad_runs, self._frozen = list(state["best"]), list(state["bad_runs"]), list(state["frozen"])


def _single_cfg(cfg: dict, seed: int, folder: str) -> dict:
    """The saved configuration of replica ``seed``'s run alone: its seed, no replicas, its folder."""
    cfg = copy.deepcopy(cfg)
    cfg["common"]["seed"] = seed
    cfg["checkpoint"]["save_dir"] = folder
    for key in ("replica_seeds", "replica_dirs"):
        if cfg.get("task") is not None and key in cfg["task"]:
            cfg["task"][key] = None
    model = cfg.get("model")
    if isinstance(model, Namespace):
        model.seed, model.save_dir = seed, folder
        for key in ("replica_seeds", "replica_dirs"):
            if hasattr(model, key):
                setattr(model, key, None)
    elif isinstance(model, dict):
        model.update({k: v for k, v in (("seed", seed), ("replica_seeds", None)) if k in model})
    return cfg
