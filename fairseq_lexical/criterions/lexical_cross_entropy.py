"""`lexical_cross_entropy`: NLL of the model's output distribution (for the lexical models, the mixture of eq. 10),
with optional label smoothing, plus any auxiliary losses the model returns; logs mean p_gate and, in validation,
greedy exact match. Target words the model never outputs (<unk> under --exclude-special-outputs) are left out of
the loss and counted (unk_targets)."""
# (No `from __future__ import annotations` here: fairseq reads the config dataclass's field types at runtime.)

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import FairseqDataclass

from ..modules.precision import fp32_or_wider


def smoothed_nll_loss(lprobs, target, epsilon: float, ignore_index: int, never_output=(), reduce: bool = True):
    """fairseq's label_smoothed_nll_loss with the smoothing spread over the words the model can output: the words
    of ``never_output`` (--exclude-special-outputs; log-probabilities about -1e5) are left out of its sum and of its
    count (otherwise each adds ~1e5 eps / V to every token's loss). Without them, fairseq's formula exactly."""
    if not never_output:
        return label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=ignore_index, reduce=reduce)
    target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    excluded = torch.tensor(sorted(set(never_output)), device=lprobs.device)
    smooth_loss = -lprobs.index_fill(-1, excluded, 0.0).sum(dim=-1, keepdim=True)
    pad_mask = target.eq(ignore_index)
    nll_loss.masked_fill_(pad_mask, 0.0)
    smooth_loss.masked_fill_(pad_mask, 0.0)
    if reduce:
        nll_loss, smooth_loss = nll_loss.sum(), smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - len(excluded) - 1)
    return (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss, nll_loss


@dataclass
class LexicalCrossEntropyConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.0, metadata={"help": "epsilon for label smoothing, 0 means none"})
    sentence_avg: bool = field(default=False, metadata={"help": "normalise by sentences, not tokens"})


@register_criterion("lexical_cross_entropy", dataclass=LexicalCrossEntropyConfig)
class LexicalCrossEntropyCriterion(FairseqCriterion):
    """Cross-entropy of the mixture (shapes in the letters of ``fairseq_lexical/modules/__init__.py``); the
    decoder's extra output may carry

    - ``p_gate`` (B x T): the gate of eq. 6, logged as its mean over target tokens;
    - ``aux_losses`` ({name: scalar summed over the batch}): added to the loss and logged one by one, per
      sample_size unit (target tokens, or sentences with --sentence-avg);
    - ``aux_sizes`` ({name: count}, optional): the count a loss is a sum over (e.g. sentences); that loss is then
      logged per count instead (its training weight does not change).

    In evaluation mode (validation) it also logs ``exact_match``: the fraction of sentences whose every target token,
    EOS included, is the argmax under teacher forcing (padding excluded, and EOS at the first step, as fairseq's
    search does). For an autoregressive model that is exactly the greedy decoder's exact match (greedy decoding
    reproduces the target iff each step's argmax, given the target prefix, is the next target token; ties aside),
    at the cost of the validation forward pass. So
    ``--best-checkpoint-metric exact_match --maximize-best-checkpoint-metric`` selects checkpoints as Thrush (2020)
    does (best validation exact match), with no decoding.
    """

    def __init__(self, task, label_smoothing: float = 0.0, sentence_avg: bool = False):
        super().__init__(task)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        self.eps = label_smoothing
        self.sentence_avg = sentence_avg
        self.eos_idx = task.target_dictionary.eos()
        self.unk_idx = task.target_dictionary.unk()

    def forward(self, model, sample, reduce=True):
        """The loss of ``sample`` under ``model``.

        Args:
            model: a fairseq model whose normalised output is B x T x V log-probabilities.
            sample: fairseq's batch: ``net_input`` (``src_tokens`` B x S, ``src_lengths`` B, ``prev_output_tokens``
                B x T), ``target`` B x T, ``ntokens``.
            reduce: sum the loss over the batch (else one value per target position: B*T, or B*T x 1 with label
                smoothing).

        Returns:
            (loss, sample_size, logging_output): loss summed over the target tokens plus the auxiliary losses,
            sample_size its divisor (target tokens, or sentences with --sentence-avg), logging_output the sums
            ``reduce_metrics`` reads.
        """
        net_output = model(**sample["net_input"])
        lprobs = fp32_or_wider(model.get_normalized_probs(net_output, log_probs=True, sample=sample))
        target = model.get_targets(sample, net_output)
        # A target word the model never outputs (--exclude-special-outputs: <unk>, a word the training data lacks)
        # costs ~1e5 nats, which would be all the validation loss shows: it is left out, as padding, and counted.
        never_output = getattr(getattr(model, "decoder", None), "excluded_outputs", ())
        unk = self.unk_idx if self.unk_idx in never_output else None
        unk_targets = target.eq(unk) if unk is not None else None
        scored = target.masked_fill(unk_targets, self.padding_idx) if unk_targets is not None else target
        replicas = sample.get("replicas")  # --replica-seeds: R models' rows, replica-major (tasks/replica_training.py)
        summed = reduce and replicas is None
        if self.eps > 0:
            loss, nll_loss = smoothed_nll_loss(
                lprobs.view(-1, lprobs.size(-1)), scored.view(-1), self.eps, self.padding_idx, never_output, summed
            )
        else:  # plain NLL: no V-sized smoothing sum in the forward, a one-hot (not dense) gradient in the backward
            nll_loss = F.nll_loss(
                lprobs.view(-1, lprobs.size(-1)),
                scored.view(-1),
                ignore_index=self.padding_idx,
                reduction="sum" if summed else "none",
            )
            loss = nll_loss
        extra = net_output[1] if isinstance(net_output[1], dict) else {}
        ntokens = sample["ntokens"]
        sample_size = sample["target"].size(0) if self.sentence_avg else ntokens
        logging_output = {
            "ntokens": ntokens,
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if replicas is not None:
            loss, nll_loss = self.replica_losses(loss, nll_loss, replicas, logging_output)
            sample_size = 1  # each replica's gradient is divided by its own sample size later (replica_training.py)
        # Logged values stay on the device, as in fairseq's own criterions: fairseq sums them and reads them once
        # per log interval. An .item() (or masked_select) here would make the host wait for the GPU every step.
        for name, aux in (extra.get("aux_losses") or {}).items():
            loss = loss + aux
            logging_output[f"aux_{name}"] = aux.data
        for name, count in (extra.get("aux_sizes") or {}).items():
            logging_output[f"auxsize_{name}"] = count
        if unk_targets is not None:
            logging_output["unk_targets"] = unk_targets.sum().data
        mask = target.ne(self.padding_idx)
        p_gate = extra.get("p_gate")
        if p_gate is not None:
            logging_output["p_gate_sum"] = p_gate.float().masked_fill(~mask, 0.0).sum().data
        if not model.training:
            # as fairseq's greedy search: never padding, and no EOS at the first step (its min_len = 1)
            best = lprobs.index_fill(-1, lprobs.new_tensor([self.padding_idx], dtype=torch.long), -math.inf)
            best[:, 0, self.eos_idx] = -math.inf
            hit = best.argmax(dim=-1).eq(target) | ~mask
            logging_output["exact_sum"] = hit.all(dim=-1).sum().data
            if replicas is not None:  # (a replica's padding rows have no target: not sentences)
                exact = hit.all(dim=-1) & mask.any(dim=-1)
                logging_output["replica_exact"] = exact.view(len(replicas["ntokens"]), -1).sum(1).data
                logging_output["exact_sum"] = logging_output["replica_exact"].sum()
        logging_output["loss"] = loss.data if replicas is None else logging_output["replica_loss"].sum()
        logging_output["nll_loss"] = nll_loss.data
        return loss, sample_size, logging_output

    def replica_losses(self, loss, nll_loss, replicas: dict, logging_output: dict):
        """--replica-seeds: (the loss and the NLL summed over replicas) from per-position losses, and each
        replica's sums and sample size in ``logging_output`` (R each): the task divides each replica's gradient by
        its own sample size once the update's batches are summed (tasks/replica_training.py)."""
        count = len(replicas["ntokens"])
        per_replica = loss.reshape(count, -1).sum(1)
        nll_per_replica = nll_loss.reshape(count, -1).sum(1)
        sizes = replicas["nsentences"] if self.sentence_avg else replicas["ntokens"]
        sizes = sizes.to(per_replica.device)
        logging_output.update(
            sample_size=sizes.sum().data,
            nsentences=replicas["nsentences"].sum().data,
            replica_loss=per_replica.data,
            replica_nll_loss=nll_per_replica.data,
            replica_sample_size=sizes.data,
            replica_ntokens=replicas["ntokens"].data,
            replica_nsentences=replicas["nsentences"].data,
        )
        return per_replica.sum(), nll_per_replica.sum()

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        loss_sum, nll_sum = total("loss"), total("nll_loss")
        ntokens, sample_size = total("ntokens"), total("sample_size")
        metrics.log_scalar("loss", loss_sum / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_sum / max(ntokens, 1) / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        if any("p_gate_sum" in log for log in logging_outputs):
            metrics.log_scalar("p_gate", total("p_gate_sum") / max(ntokens, 1), ntokens, round=3)
        if any("unk_targets" in log for log in logging_outputs):  # left out of the loss: how many
            metrics.log_scalar_sum("unk_targets", total("unk_targets"))
        if any("exact_sum" in log for log in logging_outputs):
            nsentences = total("nsentences")
            metrics.log_scalar("exact_match", total("exact_sum") / max(nsentences, 1), nsentences, round=4)
        aux_names = sorted({k for log in logging_outputs for k in log if k.startswith("aux_")})
        for name in aux_names:
            size_key = "auxsize_" + name[len("aux_") :]
            size = total(size_key) if any(size_key in log for log in logging_outputs) else sample_size
            metrics.log_scalar(name, total(name) / max(size, 1) / math.log(2), size, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
