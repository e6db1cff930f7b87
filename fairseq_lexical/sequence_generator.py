"""A beam search that ends a sentence only when no hypothesis in the beam can beat the ones it returns.

fairseq's ``SequenceGenerator`` ends a sentence as soon as ``beam`` hypotheses have ended, and it only keeps those
whose </s> ranks among the step's best ``beam`` candidates. With a lexical head the short hypotheses end first: on
SCAN and COGS it returned a junk hypothesis while a far better one (often the greedy one) was still in the beam
(docs/search.md). ``KeepBestSequenceGenerator`` searches the same beam (the ``beam`` best continuations that do not
end) and differs in what it keeps and when it stops:

- every row's </s> continuation is offered to a pool of the sentence's ``beam`` best ended hypotheses;
- a greedy lane, one extra row per sentence, follows the argmax continuation, so greedy decoding's hypothesis is
  always offered too: the best hypothesis returned never scores below greedy decoding's (in the score the search
  ranks by, normalised or not), and among equal scores it is greedy decoding's;
- a sentence ends when its pool is full (or no row can end any more), no beam row can still end above the pool's
  ``nbest``-th best, and the lane has ended or cannot beat the pool's best; or at the maximum length.

"Can still end above" uses an upper bound on the final score s_L / L^a of a row with cumulative score s (scores only
fall: s_L <= s <= 0) and final length L <= Lmax: s without normalisation (or a = 0); s / Lmax^a for a > 0 (fairseq's
default a = --lenpen = 1); s / (length + 1)^a for a < 0. So the stop is exact for the ``nbest`` best: nothing the beam
could still produce beats them. For a > 0 the bound is loose, which costs steps (measured in docs/search.md).

Beam 1 is greedy decoding and stays fairseq's own, as do prefixes and constraints. The options this search does not
implement are listed by ``keep_best_unsupported``. ``build_search_generator`` is the one place that chooses between
the two generators, for the task (so fairseq-generate and the hub) and the analysis tools alike.

Shapes in the letters of ``fairseq_lexical/modules/__init__.py``; here K is the beam size, n the sentences still
searched and each sentence has K + 1 rows (the beam, then the greedy lane).
"""

from __future__ import annotations

import bisect
import logging
import math
import numbers
from functools import partial
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional

import torch
from torch import Tensor

from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks import FairseqTask

# the searches' names and their default: defined without torch, for lexical_offline's programs and the recipes too
from lexical_offline.beam_searches import BEAM_SEARCHES, DEFAULT_BEAM_SEARCH

logger = logging.getLogger(__name__)


class GenerationOptionError(ValueError):
    """A generation option the search cannot use; the message is one line naming it (a program prints only that)."""


def check_beam(beam, name: str = "--beam") -> int:
    """``beam`` if it is a beam size, an integer >= 1; else a GenerationOptionError naming the option or keyword
    ``name``. The searches would fail inside (a RuntimeError about a tensor's shape for 0, a TypeError for '5')."""
    if isinstance(beam, bool) or not isinstance(beam, numbers.Integral) or beam < 1:
        given = f"{name} {beam!r}" if name.startswith("--") else f"{name}={beam!r}"
        raise GenerationOptionError(f"{given}: the beam size must be an integer >= 1")
    return int(beam)


def keep_best_unsupported(args, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None) -> Optional[str]:
    """Why the generation options ``args`` (fairseq's GenerationConfig or the hub's) need fairseq's generator, or
    None when ``KeepBestSequenceGenerator`` implements them."""
    if getattr(args, "score_reference", False):
        return "--score-reference"
    checks = [
        (getattr(args, "beam", 5) <= 1, "--beam 1 (greedy decoding)"),
        (getattr(args, "sampling", False), "--sampling"),
        (getattr(args, "diverse_beam_groups", -1) > 0, "--diverse-beam-groups"),
        (getattr(args, "diversity_rate", -1) > -1, "--diversity-rate"),
        (getattr(args, "match_source_len", False), "--match-source-len"),
        (bool(getattr(args, "constraints", None)), "--constraints"),
        (
            prefix_allowed_tokens_fn is not None or getattr(args, "prefix_allowed_tokens_fn", None) is not None,
            "prefix_allowed_tokens_fn",
        ),
        (getattr(args, "print_alignment", None) not in (None, False), "--print-alignment"),
        (getattr(args, "unkpen", 0) < 0, "a negative --unkpen"),
        ((extra_gen_cls_kwargs or {}).get("lm_model") is not None, "--lm-path"),
    ]
    return next((why for hit, why in checks if hit), None)


class _EndedHypotheses:
    """The rows' </s> continuations that reached a sentence's pool, stored once; the pool refers to them by id."""

    def __init__(self):
        self.starts: List[int] = []
        self.chunks: List[Dict[str, Optional[Tensor]]] = []
        self.count = 0

    def add(self, tokens: Tensor, positional_scores: Tensor, attention: Optional[Tensor]) -> int:
        """Store m hypotheses of T tokens each (</s> included).

        Args:
            tokens: m x T.
            positional_scores: m x T, each token's log-probability.
            attention: m x S x T, or None.

        Returns:
            The id of the first.
        """
        first = self.count
        self.starts.append(first)
        self.chunks.append({"tokens": tokens, "positional_scores": positional_scores, "attention": attention})
        self.count += tokens.size(0)
        return first

    def hypothesis(self, ident: int, score: Tensor) -> Dict[str, Tensor]:
        """Hypothesis ``ident`` as fairseq returns one: ``tokens`` and ``positional_scores`` T, ``attention`` S x T
        (empty without), ``score`` as given."""
        c = bisect.bisect_right(self.starts, ident) - 1
        chunk, i = self.chunks[c], ident - self.starts[c]
        attention = chunk["attention"]
        return {
            "tokens": chunk["tokens"][i],
            "score": score,
            "attention": attention[i] if attention is not None else torch.empty(0),
            "alignment": torch.empty(0),
            "positional_scores": chunk["positional_scores"][i],
        }


class KeepBestSequenceGenerator(SequenceGenerator):
    """fairseq's ``SequenceGenerator`` (same constructor and output, plus ``nbest``) with the stopping rule and greedy
    lane of the module docstring: the ``nbest`` best hypotheses (fairseq-generate's ``--nbest``, default 1) are
    exact. Greedy decoding (beam 1), prefixes and constraints run fairseq's own ``_generate``."""

    def __init__(self, models, tgt_dict, nbest: int = 1, **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        if nbest < 1:
            raise ValueError(f"nbest must be >= 1, got {nbest}")
        self.nbest = min(nbest, self.beam_size)
        self._said_fairseq = False

    def _generate(
        self,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        bos_token: Optional[int] = None,
    ):
        if self.beam_size <= 1 or prefix_tokens is not None or constraints is not None:
            if (prefix_tokens is not None or constraints is not None) and not self._said_fairseq:
                logger.info(
                    "fairseq's beam search for sentences with %s (not --beam-search keep-best)",
                    "a prefix (--prefix-size)" if prefix_tokens is not None else "constraints",
                )
                self._said_fairseq = True
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        device = src_tokens.device
        bsz, src_len = src_tokens.size()[:2]
        k = self.beam_size
        width = k + 1  # k beam rows, then the greedy lane
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise ValueError(
                f"--min-len {self.min_len} is larger than the maximum output length {max_len} "
                "(--max-len-a, --max-len-b, the model's maximum positions)"
            )

        incremental_states = [{} for _ in range(self.model.models_size)]
        encoder_outs = self.model.forward_encoder(net_input)
        order = torch.arange(bsz, device=device).repeat_interleave(width)
        encoder_outs = self.model.reorder_encoder_out(encoder_outs, order)

        # Per row: the prefix (from the BOS), each token's log-probability, the attention of each step (grown by
        # one column a step, as fairseq copies its prefixes), the cumulative score. At the first step every beam
        # row holds the same empty prefix, so only row 0 of each sentence is live.
        tokens = torch.full(
            (bsz * width, 1), self.eos if bos_token is None else bos_token, dtype=torch.long, device=device
        )
        step_scores = torch.zeros(bsz * width, 0, device=device)
        attn: Optional[Tensor] = None
        cumulative = torch.zeros(bsz, width, device=device)
        cumulative[:, 1:k] = -math.inf
        cumulative = cumulative.view(-1)

        sentence = list(range(bsz))  # original index of each sentence still searched
        pool_scores = torch.full((bsz, k), -math.inf, device=device)  # best first
        pool_ids = torch.full((bsz, k), -1, dtype=torch.long, device=device)
        ended = _EndedHypotheses()
        finalized: List[List[Dict[str, Tensor]]] = [[] for _ in range(bsz)]
        offsets = torch.arange(bsz, device=device) * width

        for step in range(max_len + 1):
            n = len(sentence)
            lane = offsets[:n] + k
            lprobs, avg_attn = self.model.forward_decoder(tokens, encoder_outs, incremental_states, self.temperature)
            lprobs = self._mask(lprobs.float(), step, max_len, tokens, n, width)
            if avg_attn is not None:
                column = avg_attn.float().unsqueeze(2)
                attn = column if attn is None else torch.cat([attn, column], 2)
            candidates = cumulative.unsqueeze(1) + lprobs  # n*(K + 1) x V
            live = cumulative.view(n, width).gt(-math.inf)

            # 1. Offer every row's </s> continuation to its sentence's pool; a beam row holding the lane's prefix
            # leaves that hypothesis to the lane.
            ending = candidates[:, self.eos].view(n, width).clone()
            prefix = tokens[:, 1:].view(n, width, -1)
            lanes_prefix = (prefix[:, :k] == prefix[:, k:]).all(-1) & live[:, :k] & live[:, k:]
            ending[:, :k] = ending[:, :k].masked_fill(lanes_prefix, -math.inf)
            if self.normalize_scores:
                ending = ending / (step + 1) ** self.len_penalty
            # A stable sort of [pool, lane, beam rows]: among equal scores the earlier wins, so a tie keeps what the
            # pool holds and prefers greedy decoding's hypothesis (a lexicon row can split its mass evenly between
            # two words, e.g. COGS; greedy decoding then takes the lower word id, the more frequent word).
            offered = torch.cat([ending[:, k:], ending[:, :k]], 1)
            merged, where = torch.cat([pool_scores, offered], 1).sort(dim=1, descending=True, stable=True)
            merged, where = merged[:, :k], where[:, :k]
            new = (where.ge(k) & merged.gt(-math.inf)).nonzero()
            new_ids = torch.full((n, width), -1, dtype=torch.long, device=device)
            if new.numel():
                b = new[:, 0]
                c = (where[b, new[:, 1]] - k - 1) % width  # the row of the sentence whose hypothesis entered
                row = b * width + c
                eos = torch.full((row.numel(), 1), self.eos, dtype=torch.long, device=device)
                hyp_tokens = torch.cat([tokens[row, 1:], eos], 1)
                hyp_scores = torch.cat([step_scores[row], lprobs[row, self.eos].unsqueeze(1)], 1)
                hyp_attn = attn[row] if attn is not None else None
                first = ended.add(hyp_tokens, hyp_scores, hyp_attn)
                new_ids[b, c] = first + torch.arange(row.numel(), device=device)
            offered_ids = torch.cat([new_ids[:, k:], new_ids[:, :k]], 1)
            pool_scores, pool_ids = merged, torch.cat([pool_ids, offered_ids], 1).gather(1, where)

            # 2. The lane's argmax; the next beam: the k best continuations of the beam rows that do not end, chosen
            # as fairseq chooses them (_next_beam). fairseq's greedy decoding takes the first of its top-2
            # candidates; so does the lane, so that the two break ties between equal words alike.
            lane_token = candidates[lane].topk(2, dim=1).indices[:, 0]
            lane_alive = live[:, k] & lane_token.ne(self.eos)
            lane_scores = candidates[lane].gather(1, lane_token.unsqueeze(1)).squeeze(1)
            lane_scores = lane_scores.masked_fill(~lane_alive, -math.inf)
            beam_scores, parent, beam_tokens = self._next_beam(candidates, step, n, k, width)

            # 3. A sentence is done when its pool holds k hypotheses (as fairseq returns) or no row can end any more,
            # no beam row can beat the nbest-th kept one, and the lane cannot beat the best.
            best_bound = self._bound(beam_scores, step, max_len).max(1).values
            done = (
                (pool_scores[:, -1].gt(-math.inf) | best_bound.eq(-math.inf))
                & (best_bound <= pool_scores[:, self.nbest - 1])
                & (~lane_alive | (self._bound(lane_scores, step, max_len) <= pool_scores[:, 0]))
            )
            done_flags = [True] * n if step == max_len else done.tolist()
            for b, is_done in enumerate(done_flags):
                if is_done:
                    finalized[sentence[b]] = self._pool(ended, pool_scores[b], pool_ids[b])
            if all(done_flags):
                break

            # 4. Carry the rows of the sentences not done into the next step.
            keep = [b for b, is_done in enumerate(done_flags) if not is_done]
            sentence = [sentence[b] for b in keep]
            keep_t = torch.tensor(keep, dtype=torch.long, device=device)
            order = torch.cat([parent, lane.unsqueeze(1)], 1)[keep_t].view(-1)
            next_tokens = torch.cat([beam_tokens, lane_token.unsqueeze(1)], 1)[keep_t].view(-1, 1)
            cumulative = torch.cat([beam_scores, lane_scores.unsqueeze(1)], 1)[keep_t].view(-1)
            tokens = torch.cat([tokens[order], next_tokens], 1)
            step_scores = torch.cat([step_scores[order], lprobs[order].gather(1, next_tokens)], 1)
            if attn is not None:
                attn = attn[order]
            pool_scores, pool_ids = pool_scores[keep_t], pool_ids[keep_t]
            self.model.reorder_incremental_state(incremental_states, order)
            encoder_outs = self.model.reorder_encoder_out(encoder_outs, order)
        return finalized

    def _next_beam(self, candidates: Tensor, step: int, n: int, k: int, width: int):
        """fairseq's beam: of the 2k best candidates of the beam rows (only row 0 at the first step, where all
        hold the same prefix), the first k that do not end, as fairseq's ``BeamSearch`` ranks them. Selecting them
        the same way (same tensor shape, same ``topk``) keeps equal scores in fairseq's order, so both searches
        keep the same beam, ties included. ``candidates``: n*(K + 1) x V cumulative scores (``k``: K). Returns their
        scores, parent rows and tokens, n x K each."""
        vocab = candidates.size(1)
        used = 1 if step == 0 and vocab - 1 >= k else k  # a vocabulary smaller than the beam: all rows (-inf)
        rows = candidates.view(n, width, vocab)[:, :used].reshape(n, -1)
        top_scores, top = rows.topk(min(2 * k, rows.size(1) - 1), dim=1)
        ends = (top % vocab).eq(self.eos) & top_scores.ne(-math.inf)
        # the first k positions that do not end: rank = position, + 2k for the ones that end
        rank = ends.long() * top.size(1) + torch.arange(top.size(1), device=top.device)
        chosen = rank.topk(k, dim=1, largest=False).indices
        picked = top.gather(1, chosen)
        parent = (torch.arange(n, device=top.device) * width).unsqueeze(1) + torch.div(
            picked, vocab, rounding_mode="floor"
        )
        # fewer than k candidates that do not end (a vocabulary of a few words): the rest of the beam is dead
        scores = top_scores.gather(1, chosen).masked_fill(ends.gather(1, chosen), -math.inf)
        return scores, parent, picked % vocab

    def _mask(self, lprobs: Tensor, step: int, max_len: int, tokens: Tensor, n: int, width: int) -> Tensor:
        """fairseq's per-step rules: no NaN, no pad, the unknown-word penalty, minimum and maximum length,
        suppressed tokens, blocked repeated n-grams. ``lprobs`` (n*(K + 1) x V) is changed in place and returned;
        ``tokens``: n*(K + 1) x (step + 1), the prefixes; ``width``: K + 1."""
        lprobs[lprobs != lprobs] = -math.inf
        lprobs[:, self.pad] = -math.inf
        lprobs[:, self.unk] -= self.unk_penalty
        if step >= max_len:
            lprobs[:, : self.eos] = -math.inf
            lprobs[:, self.eos + 1 :] = -math.inf
        if step < self.min_len:
            lprobs[:, self.eos] = -math.inf
        if self.token_indices_to_suppress is not None:
            lprobs[:, self.token_indices_to_suppress] = -math.inf
        if self.repeat_ngram_blocker is not None:
            lprobs = self.repeat_ngram_blocker(tokens, lprobs, n, width, step)
        return lprobs

    def _bound(self, scores: Tensor, step: int, max_len: int) -> Tensor:
        """The best final score that hypotheses of ``step + 1`` tokens with cumulative ``scores`` (any shape, e.g.
        n x K) can still reach (module docstring): their final length lies in [step + 2, max_len + 1], and scores only
        fall. Same shape as ``scores``."""
        a = self.len_penalty
        if not self.normalize_scores or a == 0:
            return scores
        length = max_len + 1 if a > 0 else min(step + 2, max_len + 1)
        return scores / length**a

    @staticmethod
    def _pool(ended: _EndedHypotheses, scores: Tensor, ids: Tensor) -> List[Dict[str, Tensor]]:
        return [ended.hypothesis(int(i), s) for s, i in zip(scores, ids.tolist()) if i >= 0]


def build_search_generator(
    models,
    tgt_dict,
    options,
    *,
    search: Optional[str] = None,
    beam_name: str = "beam",
    seq_gen_cls=None,
    extra_gen_cls_kwargs=None,
    prefix_allowed_tokens_fn=None,
    fairseq_build: Optional[Callable] = None,
):
    """The generator of every entrance (the tasks, the hub through its task, the analysis tools): the keep-best
    search, or fairseq's generator where the options need it.

    Args:
        models: the models to decode with (an ensemble).
        tgt_dict: the target dictionary.
        options: fairseq's GenerationConfig, the hub's or a dict (``beam``, ``beam_search``, ``nbest``, ``max_len_a``,
            ... as fairseq-generate's options). ``options.beam_search`` (the hub's keyword), else ``search`` (the
            task's --beam-search), else ``DEFAULT_BEAM_SEARCH`` chooses the search.
        search: the task's --beam-search.
        beam_name: names the beam in the error on a bad one.
        seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn: fairseq's ``build_generator``'s; a given
            ``seq_gen_cls`` is used as given.
        fairseq_build: the fairseq ``build_generator`` that builds the generator (a task's; default fairseq's own
            for ``tgt_dict``).

    Returns:
        A KeepBestSequenceGenerator, or fairseq's generator.

    Raises:
        GenerationOptionError: a bad beam.
        ValueError: an unknown search.
    """
    # 1. The options: a dict is read as fairseq's configuration is.
    if isinstance(options, dict):
        options = SimpleNamespace(**options)
    # 2. The search's name, and the beam (the searches would fail inside on a bad one).
    search = getattr(options, "beam_search", None) or search or DEFAULT_BEAM_SEARCH
    if search not in BEAM_SEARCHES:
        raise ValueError(f"beam_search={search!r}: expected one of {', '.join(BEAM_SEARCHES)}")
    check_beam(getattr(options, "beam", 5), beam_name)
    # 3. The fallbacks to fairseq's generator. Greedy decoding (beam 1) and scoring are fairseq's whatever the search
    # (the keep-best generator would run fairseq's own steps for beam 1), so only the other options get a line.
    why = keep_best_unsupported(options, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
    if search == "keep-best" and seq_gen_cls is None and why is None:
        seq_gen_cls = KeepBestSequenceGenerator
        extra_gen_cls_kwargs = {**(extra_gen_cls_kwargs or {}), "nbest": getattr(options, "nbest", 1)}
    elif search == "keep-best" and seq_gen_cls is None and not why.startswith(("--beam 1", "--score-reference")):
        logger.info("fairseq's generator, not --beam-search keep-best, which does not implement %s", why)
    # 4. fairseq builds it: its search strategy and every option, as fairseq-generate passes them.
    if fairseq_build is None:
        fairseq_build = partial(FairseqTask.build_generator, SimpleNamespace(target_dictionary=tgt_dict))
    return fairseq_build(
        models,
        options,
        seq_gen_cls=seq_gen_cls,
        extra_gen_cls_kwargs=extra_gen_cls_kwargs,
        prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
    )
