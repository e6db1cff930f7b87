"""Knowledge uncertainty of an ensemble of fairseq models on candidate sentences: token-level reverse mutual
information (Zheng & Lapata 2023, section 4 "Estimating Uncertainty", after Malinin & Gales 2021).

Definitions (Malinin & Gales 2021, "Uncertainty Estimation in Autoregressive Structured Prediction", ICLR;
section 2 for the measures, section 3 for their token-level form). For an ensemble of M members with token
distributions p_m = P(y_l | y_<l, x, theta_m) at one target position, and the ensemble's predictive distribution
p_bar = (1/M) sum_m p_m (the product-of-expectations combination, which is also how fairseq's ensemble decoding
combines members, step by step):

    mutual information        I   = H[p_bar] - (1/M) sum_m H[p_m]           = (1/M) sum_m KL(p_m || p_bar)
    expected pairwise KL      K   = (1/M^2) sum_m sum_m' KL(p_m || p_m')
    reverse mutual information RMI = (1/M) sum_m KL(p_bar || p_m)            = K - I

RMI is a measure of knowledge uncertainty (disagreement between members), zero iff every member predicts the same
distribution. Its token-level approximation of the sequence-level value is the mean over the target positions of
the token-level RMI, each computed with the members conditioned on the same prefix y_<l; here the positions are every
predicted token of the target, the final </s> included. With ``nbest`` > 1 decoded hypotheses the sentence's value
is the average over them weighted by the ensemble's sequence probabilities renormalised over the n-best list
(Malinin & Gales' importance weighting, temperature 1).

Numerics: each member's log-probabilities come from ``model.get_normalized_probs`` (fp32 for the plugin's lexical
models); sums over members and the KL are accumulated in float64, and a token-level value is clamped at 0 (a
rounding residue of about -1e-16 where members agree). Where p_bar(y) = 0 the term is 0.

torch and fairseq are imported by the functions that need them, so that importing this module is cheap.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from lexical_offline.beam_searches import DEFAULT_BEAM_SEARCH

from .checkpoints import load_checkpoints

logger = logging.getLogger(__name__)

TARGET_MODES = ("reference", "decode")


class UncertaintyError(Exception):
    """A user-facing problem: missing checkpoint or data, inconsistent members, bad options."""


# -- the measure -----------------------------------------------------------------------------------------------


class RmiAccumulator:
    """Streams members' log-probabilities (same shape ... x V each) and gives the token-level RMI (shape ...).

    Keeps two float64 tensors of that shape: the sum of the members' probabilities and of their log-probabilities.
    """

    def __init__(self):
        self.sum_p = None
        self.sum_logp = None
        self.members = 0

    def add(self, log_probs) -> None:
        import torch

        lp = log_probs.detach().to(torch.float64)
        if self.sum_p is None:
            self.sum_p, self.sum_logp = lp.exp(), lp.clone()
        else:
            if lp.shape != self.sum_p.shape:
                raise UncertaintyError(
                    f"ensemble members disagree on the output shape: {tuple(lp.shape)} vs {tuple(self.sum_p.shape)} "
                    "(were they trained with the same dictionaries?)"
                )
            self.sum_p += lp.exp()
            self.sum_logp += lp
        self.members += 1

    def rmi(self):
        """(1/M) sum_m KL(p_bar || p_m) per position = sum_y p_bar(y) [log p_bar(y) - (1/M) sum_m log p_m(y)]."""
        import torch

        if not self.members:
            raise UncertaintyError("no ensemble member was added")
        m = float(self.members)
        p_bar = self.sum_p / m
        log_p_bar = torch.log(p_bar)
        diff = log_p_bar - self.sum_logp / m
        terms = torch.where(p_bar > 0, p_bar * diff, torch.zeros_like(p_bar))
        return terms.sum(-1).clamp_min(0.0)


def token_rmi(stacked_log_probs):
    """Token-level reverse mutual information of stacked members' log-probabilities (M x ... x V) -> (...)."""
    acc = RmiAccumulator()
    for lp in stacked_log_probs:
        acc.add(lp)
    return acc.rmi()


# -- loading ---------------------------------------------------------------------------------------------------


def load_ensemble(
    paths: Sequence[str],
    data: str,
    device: str = "cpu",
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
):
    """(list of models in eval mode on ``device``, task) from fairseq checkpoints sharing one data-bin directory
    (whose dictionaries they were trained with)."""
    models, _cfg, task = load_checkpoints(paths, data, UncertaintyError, source_lang, target_lang, device)
    return models, task


# -- scoring ---------------------------------------------------------------------------------------------------


@dataclass
class UncertaintyResult:
    """Per candidate (in input order): ``rmi`` (mean token-level RMI; None when skipped), ``tokens`` (target
    positions averaged over, </s> included; of the best hypothesis in decode mode), ``hypotheses`` (decode mode:
    the best hypothesis in the target dictionary's tokens), ``token_rmi`` (per position, of the scored target or
    the best hypothesis), ``skipped`` (index -> reason)."""

    mode: str
    members: int
    rmi: List[Optional[float]]
    tokens: List[Optional[int]]
    token_rmi: List[Optional[np.ndarray]]
    hypotheses: Optional[List[Optional[str]]] = None
    skipped: Dict[int, str] = field(default_factory=dict)
    unknown_words: Dict[str, int] = field(default_factory=dict)  # side -> candidates with <unk> tokens
    settings: Dict[str, object] = field(default_factory=dict)

    def summary(self) -> Dict[str, object]:
        vals = [v for v in self.rmi if v is not None]
        reasons: Dict[str, int] = {}
        for r in self.skipped.values():
            reasons[r] = reasons.get(r, 0) + 1
        return {
            "mode": self.mode,
            "members": self.members,
            "candidates": len(self.rmi),
            "scored": len(vals),
            "skipped": reasons,
            "candidates_with_unk": self.unknown_words,
            "rmi_mean": (sum(vals) / len(vals)) if vals else None,
            "rmi_min": min(vals) if vals else None,
            "rmi_max": max(vals) if vals else None,
            "settings": self.settings,
        }


def _move(obj, device):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_move(v, device) for v in obj]
    return obj


def _collate(task, samples):
    from fairseq.data.language_pair_dataset import collate

    d = task.source_dictionary
    return collate(
        samples,
        pad_idx=d.pad(),
        eos_idx=d.eos(),
        left_pad_source=getattr(task.cfg, "left_pad_source", True),
        left_pad_target=getattr(task.cfg, "left_pad_target", False),
    )


def _batches(lengths: Sequence[int], order: Sequence[int], batch_size: int, max_tokens: Optional[int]):
    """Consecutive groups of ``order`` with at most ``batch_size`` items and (padded) at most ``max_tokens``
    positions, the longest item setting the padding; an item longer than max_tokens goes alone."""
    batch, longest = [], 0
    for i in order:
        n = lengths[i]
        new_longest = max(longest, n)
        if batch and (len(batch) >= batch_size or (max_tokens and new_longest * (len(batch) + 1) > max_tokens)):
            yield batch
            batch, new_longest = [], n
        batch.append(i)
        longest = new_longest
    if batch:
        yield batch


def teacher_forced_rmi(
    models,
    task,
    pairs: Sequence[Tuple[object, object]],
    batch_size: int = 64,
    max_tokens: Optional[int] = 2048,
    device: str = "cpu",
    progress=None,
) -> List[np.ndarray]:
    """Token-level RMI (one float64 array per pair, one value per target position, </s> included) of
    (source ids, target ids ending in </s>) pairs, each member teacher-forced on the same targets."""
    import torch

    out: List[Optional[np.ndarray]] = [None] * len(pairs)
    tlen = [int(t.numel()) for _, t in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (-int(pairs[i][0].numel()), -tlen[i], i))
    for idx in _batches(tlen, order, batch_size, max_tokens):
        batch = _collate(task, [{"id": i, "source": pairs[i][0], "target": pairs[i][1]} for i in idx])
        batch = _move(batch, device)
        acc = RmiAccumulator()
        with torch.inference_mode():
            for model in models:
                net_out = model(**batch["net_input"])
                acc.add(model.get_normalized_probs(net_out, log_probs=True))
            rmi = acc.rmi()
        target = batch["target"]
        pad = task.target_dictionary.pad()
        if tuple(rmi.shape) != tuple(target.shape):
            raise UncertaintyError(f"model output of shape {tuple(rmi.shape)} for targets of {tuple(target.shape)}")
        rmi, mask = rmi.cpu().numpy(), target.ne(pad).cpu().numpy()
        for row, i in enumerate(batch["id"].tolist()):
            out[i] = rmi[row][mask[row]]
        if progress is not None:
            progress(len(idx))
    return out


def _encode(text: str, dictionary):
    """(ids ending in </s>, whether a word mapped to <unk>)."""
    ids = dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()
    return ids, bool((ids == dictionary.unk()).any())


def ensemble_uncertainty(
    models,
    task,
    sources: Sequence[str],
    targets: Optional[Sequence[str]] = None,
    mode: str = "reference",
    beam: int = 5,
    nbest: int = 1,
    batch_size: int = 64,
    max_tokens: Optional[int] = 2048,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    device: str = "cpu",
    progress: bool = False,
    search: str = DEFAULT_BEAM_SEARCH,
) -> UncertaintyResult:
    """Token-level RMI of each candidate under the ensemble ``models`` (see the module docstring).

    ``mode="reference"``: teacher-forced on ``targets`` (the candidates' given translations); ``"decode"``: on the
    ensemble's own beam-search output (``beam`` = 1 is greedy; ``search`` 'keep-best' or 'fairseq',
    docs/search.md), the ``nbest`` best hypotheses importance-weighted.
    Sources and targets are text in the models' tokenisation (e.g. BPE), words outside the dictionaries become
    <unk> (counted in ``unknown_words``). Empty sources (and empty reference targets) and sentences longer than
    the models accept are skipped with a reason.
    """
    import torch

    if mode not in TARGET_MODES:
        raise UncertaintyError(f"unknown target mode {mode!r}: choose from {', '.join(TARGET_MODES)}")
    if mode == "reference" and targets is None:
        raise UncertaintyError("--targets reference needs the candidates' target sentences")
    if targets is not None and len(targets) != len(sources):
        raise UncertaintyError(f"{len(sources)} sources but {len(targets)} targets")
    if beam < 1 or not 1 <= nbest <= beam:
        raise UncertaintyError(f"need beam >= 1 and 1 <= nbest <= beam (beam {beam}, nbest {nbest})")
    if batch_size < 1:
        raise UncertaintyError(f"batch size must be >= 1, got {batch_size}")
    from fairseq import utils as fairseq_utils

    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    limits = fairseq_utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
    max_src, max_tgt = (limits if isinstance(limits, tuple) else (limits, limits)) if limits else (None, None)
    n = len(sources)
    result = UncertaintyResult(
        mode=mode,
        members=len(models),
        rmi=[None] * n,
        tokens=[None] * n,
        token_rmi=[None] * n,
        hypotheses=[None] * n if mode == "decode" else None,
    )
    result.settings = {
        "mode": mode,
        "beam": beam if mode == "decode" else None,
        "beam_search": search if mode == "decode" else None,
        "nbest": nbest if mode == "decode" else None,
        "batch_size": batch_size,
        "max_tokens": max_tokens,
        "device": device,
        "max_positions": [max_src, max_tgt],
        "combination": "product of expectations (mean of members' probabilities per token)",
    }
    unk = {"source": 0, "target": 0}
    encoded: Dict[int, Tuple[object, Optional[object]]] = {}
    for i, s in enumerate(sources):
        if not s.split():
            result.skipped[i] = "empty-source"
            continue
        src, has_unk = _encode(s, src_dict)
        unk["source"] += has_unk
        if max_src and src.numel() > max_src:
            result.skipped[i] = "source-too-long"
            continue
        tgt = None
        if mode == "reference":
            if not targets[i].split():
                result.skipped[i] = "empty-target"
                continue
            tgt, has_unk = _encode(targets[i], tgt_dict)
            unk["target"] += has_unk
            if max_tgt and tgt.numel() > max_tgt:
                result.skipped[i] = "target-too-long"
                continue
        encoded[i] = (src, tgt)
    result.unknown_words = unk if mode == "reference" else {"source": unk["source"]}
    todo = sorted(encoded)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"uncertainty ({mode}, {len(models)} members)", unit=" sent", mininterval=1.0)

    if mode == "reference":
        pairs = [encoded[i] for i in todo]
        per_token = teacher_forced_rmi(
            models, task, pairs, batch_size, max_tokens, device, progress=bar.update if bar is not None else None
        )
        for i, tok in zip(todo, per_token):
            result.token_rmi[i], result.tokens[i], result.rmi[i] = tok, int(tok.size), float(tok.mean())
    else:
        from ..sequence_generator import build_search_generator

        options = {"beam": beam, "beam_search": search, "max_len_a": max_len_a, "max_len_b": max_len_b, "nbest": nbest}
        gen = build_search_generator(models, tgt_dict, options)
        src_len = {i: int(encoded[i][0].numel()) for i in todo}
        order = sorted(todo, key=lambda i: (-src_len[i], i))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = _move(_collate(task, [{"id": i, "source": encoded[i][0]} for i in idx]), device)
            with torch.inference_mode():
                hypos = gen.generate(models, batch)
            pairs, owners, logp = [], [], []
            for row, i in enumerate(batch["id"].tolist()):
                for h in hypos[row][:nbest]:
                    pairs.append((encoded[i][0], h["tokens"].long().cpu()))
                    owners.append(i)
                    logp.append(float(h["positional_scores"].double().sum()))
                result.hypotheses[i] = tgt_dict.string(hypos[row][0]["tokens"].cpu())
            per_token = teacher_forced_rmi(models, task, pairs, batch_size * nbest, max_tokens, device)
            grouped: Dict[int, List[Tuple[float, np.ndarray]]] = {}
            for i, lp, tok in zip(owners, logp, per_token):
                grouped.setdefault(i, []).append((lp, tok))
            for i, hyps in grouped.items():
                top = max(lp for lp, _ in hyps)
                w = [math.exp(lp - top) for lp, _ in hyps]
                z = sum(w)
                result.rmi[i] = sum(wk / z * float(tok.mean()) for wk, (_, tok) in zip(w, hyps))
                result.token_rmi[i], result.tokens[i] = hyps[0][1], int(hyps[0][1].size)
            if bar is not None:
                bar.update(len(idx))
    if bar is not None:
        bar.close()
    return result
