"""Attention and p_gate of a trained model on one sentence, and their plot (cf. Fig. 2 of Akyurek & Andreas 2021).

The arrays come from the decoder's extra output, read by key and not by model class, so every model of the plugin
(and fairseq's own encoder-decoders) works unchanged:

- ``extra["attn"]``: the attention over source positions, B x T x S (fairseq puts it in a one-element list);
  required.
- ``extra["p_gate"]``: the gate of the lexical head, B x T (or B x T x 1), with the head's convention
  ``p(y_t) = p_gate * p_write + (1 - p_gate) * p_lex``: p_gate is the weight of the ordinary (write) distribution,
  1 - p_gate the weight of the lexicon/copy distribution. Models without a lexical head have none; only the
  attention is then shown.

Beam-search output is analysed by teacher forcing the model on its best hypothesis: the model tests check that
incremental (beam) decoding and teacher forcing give the same scores, so the arrays are the ones the search saw.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:  # torch is imported where a model is loaded
    import torch

from lexical_offline import textio
from lexical_offline.beam_searches import DEFAULT_BEAM_SEARCH

from .checkpoints import load_checkpoints, load_subset, model_device

logger = logging.getLogger(__name__)

GATE_CONVENTION = (
    "p(y_t) = p_gate * p_write + (1 - p_gate) * p_lex: p_gate is the weight of the write distribution, "
    "1 - p_gate the weight of the lexicon/copy distribution"
)


class GateAnalysisError(Exception):
    """A user-facing problem: missing checkpoint, unknown word, sample id out of range, unusable model output."""


@dataclass
class GateRecord:
    """What one sentence's plot shows. Rows are output positions (the last one emits </s>), columns source
    positions (the last one is the source's </s>)."""

    source_tokens: List[str]
    output_tokens: List[str]
    attention: np.ndarray  # T x S, each row a distribution over source positions
    p_gate: Optional[np.ndarray]  # T, or None for a model without a lexical head
    mode: str  # "teacher-forced" or "beam"
    target_origin: str  # "--target", "reference of sample N" or "best of beam K (keep-best|fairseq)"
    checkpoint: Optional[str] = None
    sample_id: Optional[int] = None
    score: Optional[float] = None  # the best hypothesis's score (beam mode)
    warnings: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "sample_id": self.sample_id,
            "mode": self.mode,
            "target_origin": self.target_origin,
            "score": self.score,
            "source_tokens": list(self.source_tokens),
            "output_tokens": list(self.output_tokens),
            "attention": np.asarray(self.attention, dtype=float).tolist(),
            "p_gate": None if self.p_gate is None else np.asarray(self.p_gate, dtype=float).tolist(),
            "gate_convention": GATE_CONVENTION if self.p_gate is not None else None,
            "warnings": list(self.warnings),
        }

    def write_json(self, path: str) -> None:
        textio.write_json(path, self.to_dict(), indent=None)


# -- loading ---------------------------------------------------------------------------------------------------


def load_model(checkpoint: str, data: str, source_lang: Optional[str] = None, target_lang: Optional[str] = None):
    """(model in eval mode on the CPU, task) from a fairseq checkpoint and the data-bin directory (dictionaries)."""
    if ":" in checkpoint and not os.path.exists(checkpoint):
        raise GateAnalysisError(f"--path {checkpoint}: give one checkpoint (ensembles are not analysed)")
    models, _cfg, task = load_checkpoints([checkpoint], data, GateAnalysisError, source_lang, target_lang)
    # as fairseq-generate prepares it: the lexical head then never generates <unk> (unless --generate-unk)
    models[0].make_generation_fast_()
    return models[0], task


def encode_tokens(text: str, dictionary, side: str, allow_unk: bool = False) -> Tuple["torch.Tensor", List[str]]:
    """Token ids of whitespace-tokenised ``text`` followed by </s>, and warnings.

    A word that is not in ``dictionary`` is an error naming it, unless ``allow_unk``: it is then mapped to <unk>
    and named in a warning.
    """
    words = text.split()
    if not words:
        raise GateAnalysisError(f"the {side} sentence is empty")
    unknown = [w for w in words if dictionary.index(w) == dictionary.unk() and w != dictionary.unk_word]
    warnings: List[str] = []
    if unknown:
        names = ", ".join(repr(w) for w in dict.fromkeys(unknown))
        if not allow_unk:
            raise GateAnalysisError(
                f"{side} word(s) not in the {side} dictionary: {names} (give --allow-unk to map them to "
                f"{dictionary.unk_word})"
            )
        warnings.append(f"{side} word(s) not in the {side} dictionary, mapped to {dictionary.unk_word}: {names}")
    ids = dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()
    return ids, warnings


def dataset_sample(task, subset: str, sample_id: int):
    """(source ids, target ids or None) of sentence ``sample_id`` of a binarised split (fairseq's sample id)."""
    ds = load_subset(task, subset, GateAnalysisError)
    n = len(ds)
    if not 0 <= sample_id < n:
        raise GateAnalysisError(
            f"sample id {sample_id} out of range: subset {subset!r} has {n} sentences (ids 0..{n - 1})"
        )
    item = ds[sample_id]
    return item["source"].long(), (item["target"].long() if item.get("target") is not None else None)


# -- the arrays ------------------------------------------------------------------------------------------------


def beam_decode(
    model,
    task,
    src_ids,
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    search: str = DEFAULT_BEAM_SEARCH,
):
    """(tokens of the best hypothesis, ending in </s>; its score) by a beam search (``search``: 'keep-best' or
    'fairseq', docs/search.md)."""
    import torch

    from ..sequence_generator import build_search_generator

    options = {"beam": beam, "beam_search": search, "max_len_a": max_len_a, "max_len_b": max_len_b}
    gen = build_search_generator([model], task.target_dictionary, options)
    device = model_device(model)
    sample = {
        "net_input": {
            "src_tokens": src_ids.long().unsqueeze(0).to(device),
            "src_lengths": torch.tensor([src_ids.numel()], device=device),
        }
    }
    with torch.no_grad():
        hypos = gen.forward(sample)
    best = hypos[0][0]
    return best["tokens"].long().cpu(), float(best["score"])


def _first_tensor(value):
    """fairseq wraps attention in a (one-element) list; accept a tensor, a list/tuple, or None."""
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if v is not None), None)
    return value


def extract_arrays(model, src_ids, tgt_ids, eos: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Teacher-forced forward of one pair; (attention T x S, p_gate T or None), T = len(tgt_ids), S = len(src_ids).

    ``tgt_ids`` ends with </s>; the decoder reads </s> followed by ``tgt_ids[:-1]``, as fairseq's collater builds
    prev_output_tokens.
    """
    import torch

    device = model_device(model)
    src = src_ids.long().unsqueeze(0).to(device)
    tgt = tgt_ids.long().unsqueeze(0).to(device)
    prev = torch.cat([tgt.new_full((1, 1), eos), tgt[:, :-1]], dim=1)
    src_len, tgt_len = src.size(1), tgt.size(1)
    with torch.no_grad():
        out = model(src_tokens=src, src_lengths=torch.tensor([src_len], device=device), prev_output_tokens=prev)
    extra = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
    if not isinstance(extra, dict):
        raise GateAnalysisError("the model's forward returns no extra output (a dict with 'attn')")
    attn = _first_tensor(extra.get("attn"))
    if attn is None:
        raise GateAnalysisError(
            "the model's output has no attention (extra['attn'] is missing or None); is the model in eval mode "
            "and does its decoder attend over the source?"
        )
    attn = attn.detach().float().cpu()
    if tuple(attn.shape) != (1, tgt_len, src_len):
        raise GateAnalysisError(
            f"extra['attn'] has shape {tuple(attn.shape)}, expected (1, {tgt_len}, {src_len}) = "
            "(batch, output positions, source positions)"
        )
    gate = _first_tensor(extra.get("p_gate"))
    if gate is not None:
        gate = gate.detach().float().cpu()
        if gate.dim() == 3 and gate.size(-1) == 1:
            gate = gate.squeeze(-1)
        if tuple(gate.shape) != (1, tgt_len):
            raise GateAnalysisError(
                f"extra['p_gate'] has shape {tuple(gate.shape)}, expected (1, {tgt_len}) or (1, {tgt_len}, 1)"
            )
        gate = gate[0].numpy()
    return attn[0].numpy(), gate


def analyse(
    model,
    task,
    src_ids,
    tgt_ids=None,
    *,
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    search: str = DEFAULT_BEAM_SEARCH,
    target_origin: Optional[str] = None,
    checkpoint: Optional[str] = None,
    sample_id: Optional[int] = None,
    warnings: Sequence[str] = (),
) -> GateRecord:
    """The record of one sentence: teacher-forced on ``tgt_ids`` if given (ids ending in </s>), else on the best
    hypothesis of a beam search of width ``beam`` (``search``: 'keep-best' or 'fairseq')."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    score = None
    if tgt_ids is None:
        tgt_ids, score = beam_decode(model, task, src_ids, beam, max_len_a, max_len_b, search)
        mode, origin = "beam", f"best of beam {beam} ({search})"
    else:
        mode, origin = "teacher-forced", target_origin or "given target"
    attention, p_gate = extract_arrays(model, src_ids, tgt_ids, tgt_dict.eos())
    return GateRecord(
        source_tokens=[src_dict[i] for i in src_ids.tolist()],
        output_tokens=[tgt_dict[i] for i in tgt_ids.tolist()],
        attention=attention,
        p_gate=p_gate,
        mode=mode,
        target_origin=origin,
        checkpoint=checkpoint,
        sample_id=sample_id,
        score=score,
        warnings=list(warnings),
    )


def hub_gates(hub, sentence: str, beam: int = 5, **generate_args) -> GateRecord:
    """The record of ``hub.translate(sentence, beam=beam)`` for a fairseq hub interface
    (``LexLSTMModel.from_pretrained(...)`` and the like): the hub's own search gives the best hypothesis, and the
    model is teacher-forced on it as in :func:`analyse`. ``record.output_tokens`` are that hypothesis's tokens
    (ending in </s>), ``record.p_gate`` one gate per output token, or None for a model without a lexical head.
    ``generate_args`` go to ``hub.generate`` as they would from ``hub.translate`` (e.g. ``max_len_b``)."""
    if len(hub.models) != 1:
        raise GateAnalysisError(f"the hub holds an ensemble of {len(hub.models)} models: gates are read from one")
    src_ids = hub.encode(sentence)  # tokenizer, BPE and source dictionary, as hub.translate does
    best = hub.generate([src_ids], beam=beam, **generate_args)[0][0]
    record = analyse(
        hub.models[0], hub.task, src_ids.to(hub.device), best["tokens"], target_origin=f"best of beam {beam} (hub)"
    )
    record.mode, record.score = "beam", float(best["score"])
    return record


# -- the plot --------------------------------------------------------------------------------------------------


def plot_record(record: GateRecord, output: str, title: Optional[str] = None, dpi: int = 120) -> None:
    """PNG: attention heatmap (rows output tokens, columns source tokens) and, beside it, the gate per output
    token as a bar split into p_gate (write) and 1 - p_gate (lexicon/copy)."""
    # fairseq may leave the root logger at DEBUG: quieten matplotlib before its import logs anything
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attn = np.asarray(record.attention, dtype=float)
    n_out, n_src = attn.shape
    has_gate = record.p_gate is not None
    heat_w = 0.5 * max(n_src, 2)
    gate_w = 2.6 if has_gate else 0.0
    width = 1.8 + heat_w + gate_w + (1.3 if has_gate else 0.9)
    height = 1.9 + 0.36 * max(n_out, 3)
    fig = plt.figure(figsize=(width, height), layout="constrained")
    if has_gate:
        # heatmap | colour bar | gap for the colour bar's labels | gate bars
        grid = fig.add_gridspec(1, 4, width_ratios=[heat_w, 0.2, 0.25, gate_w])
        ax, cax = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
        gax = fig.add_subplot(grid[3], sharey=ax)
    else:
        grid = fig.add_gridspec(1, 2, width_ratios=[heat_w, 0.2])
        ax, cax, gax = fig.add_subplot(grid[0]), fig.add_subplot(grid[1]), None
    im = ax.imshow(attn, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_src))
    ax.set_xticklabels(record.source_tokens, rotation=60, ha="right")
    ax.set_yticks(range(n_out))
    ax.set_yticklabels(record.output_tokens)
    ax.set_xlabel("source tokens")
    ax.set_ylabel("output tokens")
    ax.set_title("attention", fontsize=9)
    fig.colorbar(im, cax=cax)

    if has_gate:
        gate = np.asarray(record.p_gate, dtype=float)
        rows = np.arange(n_out)
        gax.barh(rows, gate, height=0.7, color="#3b75af", label="p_gate = weight of p_write")
        gax.barh(
            rows,
            1.0 - gate,
            left=gate,
            height=0.7,
            color="#ef8636",
            label="1 - p_gate = weight of lexicon/copy (p_lex)",
        )
        for r, g in zip(rows, gate):
            gax.text(1.03, r, f"{g:.2f}", va="center", fontsize=7)
        gax.set_xlim(0.0, 1.0)
        gax.set_xticks([0.0, 0.5, 1.0])
        gax.set_xlabel("p_gate   (p = p_gate p_write + (1 - p_gate) p_lex)", fontsize=8)
        gax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7, frameon=False)
        gax.tick_params(axis="y", left=False, labelleft=False)
    ax.set_ylim(n_out - 0.5, -0.5)

    if title is None:
        parts = [os.path.basename(record.checkpoint) if record.checkpoint else "model"]
        if record.sample_id is not None:
            parts.append(f"sample {record.sample_id}")
        parts.append(f"{record.mode}: {record.target_origin}")
        if record.score is not None:
            parts.append(f"score {record.score:.3f}")
        title = " | ".join(parts)
        if not has_gate:
            title += "\nno p_gate in the model's output (no lexical head): attention only"
    fig.suptitle(title, fontsize=9)
    fig.savefig(output, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
