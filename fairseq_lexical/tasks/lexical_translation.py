"""`lexical_translation`: fairseq's translation task whose generator keeps the best hypothesis.

Everything but ``build_generator`` is fairseq's ``translation`` (same options, same data, same training; with
``--batch-order random`` the training batches are the authors' code's instead).
``build_generator`` is the one place where fairseq-generate, fairseq-interactive, the hub, ``--eval-bleu`` validation
and ``SequenceScorer`` get their search, so a task is the fairseq mechanism that switches the search without
touching fairseq for other models: ``--task lexical_translation`` gives ``KeepBestSequenceGenerator``
(fairseq_lexical/sequence_generator.py, docs/search.md), ``--beam-search fairseq`` or ``--task translation``
fairseq's own. The hub of the plugin's models (``from_pretrained``) uses this task whatever task the checkpoint
was trained with; ``hub.generate(..., beam_search="fairseq")`` switches one call.

The generator's inputs are checked there too (``--beam``, ``--lexicon-override``, ``--lexicon-override-gate-bias``).
In a task a program set up (fairseq-generate, fairseq-interactive, fairseq-train's --eval-bleu) a bad option ends
the program as argparse ends it: one line, exit status 2. Elsewhere (the hub, Python) it is a ValueError.
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from omegaconf import OmegaConf, open_dict

from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from lexical_offline.beam_searches import BEAM_SEARCHES, DEFAULT_BEAM_SEARCH, KEEP_BEST_TASK_NAME

from ..errors import usage_error
from ..modules.lexicon_override import apply_override
from .replica_training import ReplicaTraining
from ..sequence_generator import GenerationOptionError, build_search_generator, check_beam

logger = logging.getLogger(__name__)

TASK_NAME = KEEP_BEST_TASK_NAME


@dataclass
class LexicalTranslationConfig(TranslationConfig):
    beam_search: ChoiceEnum(list(BEAM_SEARCHES)) = field(
        default=DEFAULT_BEAM_SEARCH,
        metadata={
            "help": "'keep-best': a sentence ends only when no hypothesis in the beam can beat the --beam best ended "
            "ones, and greedy decoding's hypothesis is always among the candidates (never worse than greedy in "
            "model score); 'fairseq': fairseq's search, which ends a sentence once --beam hypotheses have "
            "ended. --beam 1 is greedy decoding either way (docs/search.md)"
        },
    )
    batch_order: ChoiceEnum(["length", "random"]) = field(
        default="length",
        metadata={
            "help": "training batches: 'length' (fairseq's: sentences of similar lengths batched together, the "
            "batches shuffled); 'random': each epoch the training sentences in a new random order, cut into "
            "batches (--batch-size / --max-tokens) in that order, as the authors' released code batches "
            "(docs/authors_code.md). Validation and generation batch by length either way"
        },
    )
    replica_seeds: Optional[str] = field(
        default=None,
        metadata={
            "help": "train one model per seed (comma-separated, e.g. 1,2,3) in one process, each the run --seed s "
            "makes alone (its initial weights, batches, clipping, Adam), stacked so that a GPU runs them at about "
            "one run's cost; each replica's checkpoints in SAVE_DIR/seed{s}/, its validation as loss_s{s}; "
            "--patience per replica; --best-checkpoint-metric's value is the mean of the replicas' bests "
            "(fairseq_lexical/tasks/replica_training.py). lex_lstm and lstm_plain architectures, fp32, one process"
        },
    )
    replica_dirs: Optional[str] = field(
        default=None,
        metadata={
            "help": "with --replica-seeds: where each replica's checkpoints go, a path with {seed} in it (default "
            "SAVE_DIR/seed{seed})"
        },
    )
    lexicon_override: Optional[str] = field(
        default=None,
        metadata={
            "help": "a lexicon file (source<TAB>target<TAB>weight): its source words get these rows for this run of "
            "the generator; the checkpoint is not changed (docs/terms.md)"
        },
    )
    lexicon_override_gate_bias: float = field(
        default=0.0,
        metadata={
            "help": "with --lexicon-override: lower p_gate's logit (the weight of p_write) by this times the "
            "attention on the overridden source words, so that their rows are used"
        },
    )


class KeepBestGeneration:
    """A fairseq translation task's generator with the plugin's search and --lexicon-override (module docstring):
    mixed into lexical_translation and the pretrained families' tasks (pretrained_tasks.py). Reads the task's
    ``beam_search``, ``lexicon_override`` and ``lexicon_override_gate_bias`` options."""

    # True where a program set the task up from its options (fairseq's setup_task without from_checkpoint); the
    # hub's task comes with its checkpoint
    command_line = False

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        task = super().setup_task(cfg, **kwargs)
        task.command_line = not kwargs.get("from_checkpoint", False)
        return task

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        # the hub's keywords, else the options; applied (or undone) on every generator, so one call's terms do not
        # stay in the model for the next
        options = self.cfg if self.cfg is not None else self.args  # fairseq's legacy tasks keep only args
        keywords = getattr(args, "lexicon_override", None), getattr(args, "lexicon_override_gate_bias", None)
        override = keywords[0] or getattr(options, "lexicon_override", None)
        bias = getattr(options, "lexicon_override_gate_bias", 0.0) if keywords[1] is None else keywords[1]
        program = self.command_line and keywords == (None, None)  # no hub keyword: every value is an option
        beam_name = "--beam" if program else "beam"
        try:
            check_beam(getattr(args, "beam", 5), beam_name)  # before the override: the beam is the first option
            apply_override(models, override, self.source_dictionary, self.target_dictionary, bias)
        except GenerationOptionError as e:
            if program:
                usage_error(str(e))
            raise
        # the hub's keyword beam_search, else the option; the choice and its fallbacks: sequence_generator.py
        return build_search_generator(
            models,
            self.target_dictionary,
            args,
            search=getattr(options, "beam_search", None),
            beam_name=beam_name,
            seq_gen_cls=seq_gen_cls,
            extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
            fairseq_build=self.fairseq_build_generator,
        )

    def fairseq_build_generator(self, models, args, **kwargs):
        """The base task's own build_generator (a task whose generator needs more, e.g. mBART's end token, says so
        here)."""
        return super().build_generator(models, args, **kwargs)


@register_task(TASK_NAME, dataclass=LexicalTranslationConfig)
class LexicalTranslationTask(KeepBestGeneration, ReplicaTraining, TranslationTask):
    """fairseq's translation task with the keep-best beam search (module docstring) and `--replica-seeds`
    (``ReplicaTraining``)."""

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.setup_replicas(getattr(cfg, "replica_seeds", None), getattr(cfg, "replica_dirs", None))

    def build_model(self, cfg, from_checkpoint=False):
        build_one = super().build_model
        if not self.replica_seeds:
            return build_one(cfg, from_checkpoint)
        return self.build_replicated_model(cfg, lambda args: build_one(args, from_checkpoint), from_checkpoint)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self.replica_seeds:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        self.replica_train_step(optimizer)
        loss, sample_size, logging_output = super().train_step(
            sample, model, criterion, optimizer, update_num, ignore_grad
        )
        if not ignore_grad:
            self.count_replica_batch(logging_output)
        return loss, sample_size, logging_output

    def optimizer_step(self, optimizer, model, update_num):
        if not self.replica_seeds:
            return super().optimizer_step(optimizer, model, update_num)
        self.replica_optimizer_step(optimizer)

    def valid_step(self, sample, model, criterion):
        if self.replica_seeds:  # every replica on the same batch
            sample = self.merge_samples([sample] * len(self.replica_seeds))
        return super().valid_step(sample, model, criterion)

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if self.replica_seeds:
            self.log_replica_metrics(logging_outputs)

    def post_validate(self, model, stats, agg):
        if self.replica_seeds:
            self.replica_post_validate(stats)

    @classmethod
    def from_translation_task(cls, task: TranslationTask) -> "LexicalTranslationTask":
        """The same task (options, dictionaries, loaded data sets) with this task's generator: what the plugin's
        hub uses for a checkpoint trained with ``--task translation``."""
        cfg = OmegaConf.structured(LexicalTranslationConfig)
        with open_dict(cfg):
            for key, value in task.cfg.items():
                if key in cfg and key != "_name":
                    cfg[key] = value
        new = cls(cfg, task.src_dict, task.tgt_dict)
        new.datasets = task.datasets
        return new

    def get_batch_iterator(self, dataset, *args, **kwargs):
        training = dataset is self.datasets.get(self.cfg.train_subset)
        if training and self.replica_seeds:
            if args:
                raise TypeError("get_batch_iterator: with --replica-seeds, pass the training set's options by name")
            return self.replica_batch_iterator(dataset, self._training_batches, **kwargs)
        if training:
            return self._training_batches(dataset, *args, **kwargs)
        return super().get_batch_iterator(dataset, *args, **kwargs)

    def _training_batches(self, dataset, *args, **kwargs):
        """One run's training batches: fairseq's, or the authors' random batches (--batch-order random)."""
        if self.cfg.batch_order != "random":
            return super().get_batch_iterator(dataset, *args, **kwargs)
        return random_order_batches(self, dataset, *args, **kwargs)


def random_order_batches(
    task,
    dataset,
    max_tokens=None,
    max_sentences=None,
    max_positions=None,
    ignore_invalid_inputs=False,
    required_batch_size_multiple=1,
    seed=1,
    num_shards=1,
    shard_id=0,
    num_workers=0,
    epoch=1,
    data_buffer_size=0,
    disable_iterator_cache=False,
    skip_remainder_batch=False,
    grouped_shuffling=False,
    update_epoch_batch_itr=False,
):
    """fairseq's EpochBatchIterator over batches made anew each epoch from a random order of the sentences (a
    function of seed and epoch, so a resumed epoch gets its batches again). The collater sorts each batch by source
    length, as the authors' code sorts inside its random batches."""

    def make_batches(dataset, epoch):
        with data_utils.numpy_seed(seed + epoch):
            order = np.random.permutation(len(dataset))
        if max_positions is not None:  # keeps the order
            order = task.filter_indices_by_size(order, dataset, max_positions, ignore_invalid_inputs)
        return dataset.batch_by_size(
            order,
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            required_batch_size_multiple=required_batch_size_multiple,
        )

    dataset.set_epoch(epoch)
    return iterators.EpochBatchIterator(
        dataset=dataset,
        collate_fn=dataset.collater,
        batch_sampler=make_batches,
        seed=seed,
        num_shards=num_shards,
        shard_id=shard_id,
        num_workers=num_workers,
        epoch=epoch,
        buffer_size=data_buffer_size,
        skip_remainder_batch=skip_remainder_batch,
        grouped_shuffling=grouped_shuffling,
    )
