"""Why each output word was chosen: the two branches of the lexical head for every token of a hypothesis.

For output token y_t the head's mixture (Akyurek & Andreas 2021, eqs. 6, 9, 10) is

    p(y_t) = p_gate p_write(y_t)  +  (1 - p_gate) sum_j alpha_tj L[x_j, y_t]
             ----- written -----     --------- from the lexicon ----------

and each token gets: ``p_gate``, the two branches (``write``, ``lexicon``; their sum is the model's p(y_t)), the
source position with the most lexical mass (argmax_j alpha_tj L[x_j, y_t]) and the lexicon entry it used
(x_j -> y_t with weight L[x_j, y_t]). A token is ``"lexicon"`` when its lexicon branch is the larger one, else
``"written"``.

The numbers are read from the model itself: the hypothesis is teacher-forced (incremental decoding reproduces
teacher-forced scores, tests/helpers/model_checks.py), a forward hook takes the head's own inputs (write logits, gate
features, attention, source tokens), and the head's own methods give p_gate, p_lex and the rows of L. Every
token's two branches are checked against the model's log-probability (``get_normalized_probs``); a model whose
numbers do not add up is an error, never a page of wrong numbers. Where the model sets some words' probability to 0
at inference and renormalises the rest, both branches are divided by the mass left (``renormalization``), so that
they still add up to its p(y). Models without a lexical head are refused. A step whose mixture puts all its mass on
masked words leaves nothing to renormalise: the model's numbers there are not defined, and the sentence cannot be
explained (an ExplainError naming the token; ``unexplained_sentence`` records such a sentence for the page).

Entry points: ``explain_pair`` (a model and token ids), ``explain`` (a fairseq hub interface and sentences,
e.g. ``explain(LexLSTMModel.from_pretrained(...), "dax lug")``), ``render_html`` (the page of
``tools/explain.py``).
"""

from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Union

from .checkpoints import model_device
from .gates import GateAnalysisError, _first_tensor

ORIGINS = ("lexicon", "written")
# Relative and absolute tolerance of the check that the two branches add up to the model's p(y_t) (fp32 sums).
CHECK_RTOL, CHECK_ATOL = 1e-4, 1e-6


class ExplainError(GateAnalysisError):
    """A user-facing problem (no lexical head, an ensemble, numbers that do not add up)."""


@dataclass
class LexiconEntry:
    source: str  # x_j
    target: str  # y_t
    weight: float  # L[x_j, y_t]


@dataclass
class TokenExplanation:
    position: int  # t (0-based; the last token of a hypothesis is </s>)
    token: str
    p: float  # the model's p(y_t) = exp(log p), from get_normalized_probs
    log_p: float
    p_gate: float  # weight of the write distribution (eq. 6)
    write: float  # p_gate * p_write(y_t)
    lexicon: float  # (1 - p_gate) * p_lex(y_t)  (eqs. 9, 10)
    origin: str  # "lexicon" if lexicon > write, else "written"
    lexicon_share: float  # lexicon / (write + lexicon)
    renormalization: float  # both branches are the mixture's times this: 1, or 1 / (mass left) where the model
    #                         masks words at inference
    source_position: Optional[int]  # argmax_j alpha_tj L[x_j, y_t]; None when no source row holds y_t
    source_word: Optional[str]
    attention: Optional[float]  # alpha_tj at that position
    lexical_mass: Optional[float]  # alpha_tj L[x_j, y_t] at that position
    entry: Optional[LexiconEntry]


@dataclass
class SentenceExplanation:
    source_tokens: List[str]  # as the model saw them (unknown words as <unk>), ending in </s>
    output_tokens: List[str]  # the hypothesis, ending in </s>
    tokens: List[TokenExplanation]
    sample_id: Optional[int] = None
    translation: Optional[str] = None  # the hypothesis as text (the hub's decode, or the tokens joined)
    reference: Optional[str] = None
    correct: Optional[bool] = None  # hypothesis == reference (whitespace tokens); None without a reference
    score: Optional[float] = None  # the search's score of the hypothesis, where known
    warnings: List[str] = field(default_factory=list)
    error: Optional[str] = None  # why the sentence could not be explained (then ``tokens`` is empty)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def hypothesis(self) -> str:
        return " ".join(self.output_tokens[:-1] if self.output_tokens[-1:] == ["</s>"] else self.output_tokens)


def lexical_head_of(model):
    """The model's LexicalTranslationHead, or an ExplainError saying why there is none."""
    from ..modules.lexical_head import LexicalTranslationHead

    head = getattr(getattr(model, "decoder", None), "lexical_head", None)
    if not isinstance(head, LexicalTranslationHead):
        raise ExplainError(
            f"the model ({type(model).__name__}) has no lexical head (trained with --lexicon none, or another "
            "architecture): every output word is written by the decoder, there is nothing to explain"
        )
    return head


def explain_pair(
    model,
    task,
    src_ids,
    tgt_ids,
    *,
    sample_id: Optional[int] = None,
    reference: Optional[str] = None,
    score: Optional[float] = None,
    translation: Optional[str] = None,
    warnings: Sequence[str] = (),
) -> SentenceExplanation:
    """Teacher-force ``tgt_ids`` (a hypothesis ending in </s>) on ``src_ids`` (ending in </s>) and explain every
    output token. The model must be in eval mode (fairseq's hub and ``gates.load_model`` give it so)."""
    import torch

    head = lexical_head_of(model)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    device = model_device(model)
    src = src_ids.long().to(device).unsqueeze(0)
    tgt = tgt_ids.long().to(device).unsqueeze(0)
    if tgt.size(1) == 0:
        raise ExplainError("the hypothesis is empty (it needs at least </s>)")
    # the decoder reads </s> then y_<t, as fairseq's collater builds prev_output_tokens
    prev = torch.cat([tgt.new_full((1, 1), tgt_dict.eos()), tgt[:, :-1]], dim=1)
    seen: List[tuple] = []

    def hook(module, args, output):
        seen.append(args)

    handle = head.register_forward_hook(hook)
    try:
        with torch.no_grad():
            net_output = model(
                src_tokens=src, src_lengths=torch.tensor([src.size(1)], device=device), prev_output_tokens=prev
            )
            lprobs = model.get_normalized_probs(net_output, log_probs=True).float()
            if len(seen) != 1:
                raise ExplainError(f"the lexical head ran {len(seen)} times in one forward pass (expected once)")
            write_logits, gate_features, attn, head_src = seen[0]
            # float64: the mass left after masking is a small difference where the mixture sits almost wholly on
            # a masked word (a gate near 0 over a source word whose row is <unk>), which fp32 rounds to 0
            p_gate = torch.sigmoid(head.gate_logit(gate_features, write_logits, attn, head_src).double())[0]  # T
            p_write = torch.softmax(write_logits.double(), dim=-1)[0]  # T x V
            attn = attn.float()
            if head.copy_scatter_softmax:
                p_lex = head.scatter_softmax_probs(attn, head_src)[0].double()
            else:
                p_lex = head.lexical_probs(attn, head_src)[0].double()  # T x V
            # the rows of L as the head applies them: p_lex under one-hot attention on each source position
            n_src = head_src.size(1)
            rows = head.lexical_probs(torch.eye(n_src, device=device).unsqueeze(0), head_src)[0]  # S x V
    finally:
        handle.remove()
    extra = net_output[1] if isinstance(net_output, (tuple, list)) and len(net_output) > 1 else {}
    model_gate = _first_tensor(extra.get("p_gate")) if isinstance(extra, dict) else None
    if model_gate is not None:
        model_gate = model_gate.float().reshape(-1)
        if model_gate.numel() != p_gate.numel() or not torch.allclose(model_gate, p_gate.float(), rtol=1e-5, atol=1e-6):
            raise ExplainError("p_gate recomputed from the head's inputs differs from the decoder's extra['p_gate']")

    # A model that masks words at inference (probability set to 0, the rest renormalised) divides both branches
    # by the mixture's mass left on the other words: found from the -inf of its own log-probabilities. Summed
    # over the words kept rather than 1 - the masked mass, which cancels to 0 when nearly all of it is masked;
    # exactly 1 at a step with nothing masked.
    mixture = p_gate.unsqueeze(-1) * p_write + (1.0 - p_gate).unsqueeze(-1) * p_lex  # T x V
    masked = torch.isneginf(lprobs[0]) & (mixture > 0)
    kept = torch.where(masked.any(-1), mixture.masked_fill(masked, 0.0).sum(-1), 1.0)  # T
    alpha = attn[0]  # T x S
    src_tokens = [src_dict[i] for i in head_src[0].tolist()]
    out_tokens = [tgt_dict[i] for i in tgt[0].tolist()]
    tokens = []
    for t, y in enumerate(tgt[0].tolist()):
        g = float(p_gate[t])
        masked_words = ", ".join(tgt_dict[i] for i in masked[t].nonzero().flatten().tolist())
        if not float(kept[t]) > 0.0:
            raise ExplainError(
                f"token {t} ({out_tokens[t]!r}): the mixture puts its whole mass on words the model never outputs "
                f"at inference ({masked_words}; p_gate = {g:.3g}), so nothing is left to renormalise and the "
                "model's probabilities at this step are not defined"
            )
        if bool(masked[t, y]):
            raise ExplainError(
                f"token {t} ({out_tokens[t]!r}): the model never outputs this word at inference (its probability "
                "is set to 0), so no search of this checkpoint produced this hypothesis"
            )
        log_p = float(lprobs[0, t, y])
        if math.isnan(log_p) or log_p > CHECK_RTOL:
            raise ExplainError(
                f"token {t} ({out_tokens[t]!r}): the model's own log-probability is {log_p:.6g}, not that of a "
                "probability"
            )
        p = math.exp(log_p)
        scale = 1.0 / float(kept[t])
        write = g * float(p_write[t, y]) * scale
        lexicon = (1.0 - g) * float(p_lex[t, y]) * scale
        if not math.isclose(write + lexicon, p, rel_tol=CHECK_RTOL, abs_tol=CHECK_ATOL):
            raise ExplainError(
                f"token {t} ({out_tokens[t]!r}): (p_gate p_write + (1 - p_gate) p_lex) x {scale:.6g} = "
                f"{write + lexicon:.6g} but the model's p = {p:.6g}; the head's numbers do not reproduce the model's "
                "output"
            )
        mass = alpha[t] * rows[:, y]  # alpha_tj L[x_j, y_t]
        j = int(torch.argmax(mass))
        has_entry = float(mass[j]) > 0.0
        share = lexicon / (write + lexicon) if write + lexicon > 0 else 0.0
        tokens.append(
            TokenExplanation(
                position=t,
                token=out_tokens[t],
                p=p,
                log_p=log_p,
                p_gate=g,
                write=write,
                lexicon=lexicon,
                origin="lexicon" if lexicon > write else "written",
                lexicon_share=share,
                renormalization=scale,
                source_position=j if has_entry else None,
                source_word=src_tokens[j] if has_entry else None,
                attention=float(alpha[t, j]) if has_entry else None,
                lexical_mass=float(mass[j]) if has_entry else None,
                entry=LexiconEntry(src_tokens[j], out_tokens[t], float(rows[j, y])) if has_entry else None,
            )
        )
    hyp_text = " ".join(out_tokens[:-1] if out_tokens[-1:] == [tgt_dict.eos_word] else out_tokens)
    return SentenceExplanation(
        source_tokens=src_tokens,
        output_tokens=out_tokens,
        tokens=tokens,
        sample_id=sample_id,
        translation=translation if translation is not None else hyp_text,
        reference=reference,
        correct=_correct(hyp_text, reference),
        score=score,
        warnings=list(warnings),
    )


def _correct(hypothesis: str, reference: Optional[str]) -> Optional[bool]:
    return None if reference is None else hypothesis.split() == reference.split()


def unexplained_sentence(
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    reason: str,
    *,
    sample_id: Optional[int] = None,
    reference: Optional[str] = None,
    score: Optional[float] = None,
    warnings: Sequence[str] = (),
) -> SentenceExplanation:
    """A sentence that could not be explained (``reason``, e.g. an ExplainError's message): its tokens and whether
    it is correct, no numbers; the page shows the reason in its place, and the others are explained as usual."""
    sentence = SentenceExplanation(
        source_tokens=list(source_tokens),
        output_tokens=list(output_tokens),
        tokens=[],
        sample_id=sample_id,
        reference=reference,
        score=score,
        warnings=list(warnings),
        error=reason,
    )
    sentence.translation = sentence.hypothesis
    sentence.correct = _correct(sentence.hypothesis, reference)
    return sentence


def explain(
    hub,
    sentences: Union[str, Sequence[str]],
    beam: int = 5,
    references: Optional[Sequence[str]] = None,
    **generate_kwargs,
) -> Union[SentenceExplanation, List[SentenceExplanation]]:
    """Translate with a fairseq hub interface (``Model.from_pretrained(...)``) and explain each best hypothesis:
    the hub's ``translate`` plus, per output token, p_gate, both branches, the source word and lexicon entry.

    ``sentences`` is one string (one explanation back) or a list. ``generate_kwargs`` go to ``hub.generate``
    (``max_len_b``, ``lenpen``, ...). The translation text is ``hub.decode`` of the hypothesis."""
    single = isinstance(sentences, str)
    batch = [sentences] if single else list(sentences)
    if len(hub.models) != 1:
        raise ExplainError(f"the hub holds {len(hub.models)} models: explain one checkpoint, not an ensemble")
    if references is not None and len(references) != len(batch):
        raise ExplainError(f"{len(references)} references for {len(batch)} sentences")
    src = [hub.encode(s) for s in batch]
    hypos = hub.generate(src, beam=beam, **generate_kwargs)
    out = []
    for i, (s, h) in enumerate(zip(src, hypos)):
        best = h[0]
        out.append(
            explain_pair(
                hub.models[0],
                hub.task,
                s.cpu(),
                best["tokens"].cpu(),
                sample_id=i,
                reference=None if references is None else references[i],
                score=float(best["score"]),
                translation=hub.decode(best["tokens"]),
            )
        )
    return out[0] if single else out


# -- the page ----------------------------------------------------------------------------------------------------

LEXICON_RGB = (239, 134, 54)  # orange: from the lexicon (the colour of tools/plot_gates.py's lexicon bars)
WRITTEN_RGB = (110, 165, 220)  # blue: written by the decoder

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 70em; }
h1 { font-size: 1.3em; margin-bottom: 0.2em; }
.meta { color: #555; font-size: 0.9em; margin: 0.3em 0; }
.legend span.tok { margin-right: 0.4em; }
section.sentence { border-top: 1px solid #ddd; padding: 0.5em 0; }
section.error .id { color: #b00020; font-weight: bold; }
.row.unexplained { color: #b00020; }
.row { margin: 0.25em 0; line-height: 2em; }
.label { display: inline-block; width: 6.5em; color: #777; font-size: 0.85em; }
span.tok, span.src { padding: 0.15em 0.3em; border-radius: 0.25em; margin-right: 0.15em; white-space: nowrap; }
span.src.used { border-bottom: 3px solid rgb(239, 134, 54); }
span.ref { color: #444; }
.badge { font-size: 0.75em; padding: 0.05em 0.4em; border-radius: 0.6em; background: #b00020; color: white; }
.badge.ok { background: #2e7d32; }
"""


# In every page, so that the tool overwrites a page of its own and nothing else; pages written before the marker
# are known by their formula line.
PAGE_MARKER = '<meta name="generator" content="fairseq-lexical-explain">'
_FORMULA_LINE_OF_OLDER_PAGES = (
    '<p class="meta">p(y) = p_gate p_write(y) + (1 - p_gate) &Sigma;<sub>j</sub> &alpha;<sub>j</sub> '
)
# The hover text names the renormalization above this (over 1% of the mixture's mass masked): below, it is noise.
RENORMALIZATION_SHOWN = 1.01


def is_explain_page(path: str) -> bool:
    """Whether the file at ``path`` is a page written by ``render_html``: the marker in its head, or the formula line
    of the pages written before the marker."""
    with open(path, "rb") as f:
        head = f.read(1 << 16).decode("utf-8", errors="replace")
    return head.startswith("<!DOCTYPE html>") and (PAGE_MARKER in head or _FORMULA_LINE_OF_OLDER_PAGES in head)


def _rgba(rgb, alpha: float) -> str:
    return f"rgba({rgb[0]}, {rgb[1]}, {rgb[2]}, {alpha:.2f})"


def token_title(tok: TokenExplanation) -> str:
    """Hover text of an output token: where it came from, the entry, and the numbers."""
    if tok.origin == "lexicon" and tok.entry is not None:
        head = (
            f"{tok.token}: translated from '{tok.source_word}' (source position {tok.source_position}) by the "
            f"lexicon entry {tok.entry.source} -> {tok.entry.target} (L = {tok.entry.weight:.3g})"
        )
    elif tok.origin == "lexicon":
        head = f"{tok.token}: from the lexicon"
    else:
        head = f"{tok.token}: written by the decoder"
        if tok.entry is not None:
            head += (
                f"; most lexical mass from '{tok.source_word}' (position {tok.source_position}, entry "
                f"{tok.entry.source} -> {tok.entry.target}, L = {tok.entry.weight:.3g})"
            )
    text = (
        f"{head}\np(y) = {tok.p:.4f} = written {tok.write:.4f} [p_gate p_write] + lexicon {tok.lexicon:.4f} "
        f"[(1 - p_gate) p_lex]\np_gate = {tok.p_gate:.3g}"
    )
    if tok.renormalization > RENORMALIZATION_SHOWN:
        text += (
            f"\nthe mixture's mass on words the model never outputs at inference (<unk>) is removed: both branches "
            f"are divided by the {1.0 / tok.renormalization:.3g} left (x {tok.renormalization:.3g})"
        )
    return text


def _unexplained_html(s: SentenceExplanation) -> List[str]:
    """The rows of a sentence that could not be explained: its words uncoloured, and why."""
    esc = html.escape
    words = [w for w in s.source_tokens if w != "</s>"]
    output = s.output_tokens[:-1] if s.output_tokens[-1:] == ["</s>"] else s.output_tokens
    return [
        f'<div class="row"><span class="label">source</span>{esc(" ".join(words))}</div>',
        f'<div class="row"><span class="label">output</span>{esc(" ".join(output)) or "(empty)"}</div>',
        f'<div class="row unexplained"><span class="label">not explained</span>{esc(s.error or "")}</div>',
    ]


def _sentence_html(s: SentenceExplanation, index: int) -> str:
    esc = html.escape
    if s.error is not None:
        return _section_html(s, index, _unexplained_html(s))
    lex_from: Dict[int, List[str]] = {}
    for tok in s.tokens:
        if tok.origin == "lexicon" and tok.source_position is not None:
            lex_from.setdefault(tok.source_position, []).append(tok.token)
    src_spans = []
    for j, w in enumerate(s.source_tokens):
        if w == "</s>":
            continue
        used = lex_from.get(j)
        title = f"source position {j}" + (f"; output translated from it: {', '.join(used)}" if used else "")
        src_spans.append(
            f'<span class="src{" used" if used else ""}" data-pos="{j}" title="{esc(title)}">{esc(w)}</span>'
        )
    out_spans = []
    for tok in s.tokens:
        if tok.token == "</s>" and tok.position == len(s.tokens) - 1:
            continue
        rgb = LEXICON_RGB if tok.origin == "lexicon" else WRITTEN_RGB
        # pale at a 50/50 split, full colour when one branch holds all of p(y)
        strength = abs(2.0 * tok.lexicon_share - 1.0)
        src = "" if tok.source_position is None else f' data-source="{tok.source_position}"'
        out_spans.append(
            f'<span class="tok {tok.origin}" style="background: {_rgba(rgb, 0.2 + 0.8 * strength)}"{src} '
            f'title="{esc(token_title(tok))}">{esc(tok.token)}</span>'
        )
    rows = [
        f'<div class="row"><span class="label">source</span>{" ".join(src_spans)}</div>',
        f'<div class="row"><span class="label">output</span>{" ".join(out_spans) or "(empty)"}</div>',
    ]
    return _section_html(s, index, rows)


def _section_html(s: SentenceExplanation, index: int, rows: List[str]) -> str:
    """One sentence's section: its id and correctness, ``rows``, the reference where it differs, the warnings."""
    esc = html.escape
    status = ""
    if s.correct is not None:
        status = '<span class="badge ok">correct</span>' if s.correct else '<span class="badge">error</span>'
    sid = s.sample_id if s.sample_id is not None else index
    rows = [f'<div class="row"><span class="id">#{sid}</span> {status}</div>', *rows]
    if s.reference is not None and not s.correct:
        rows.append(
            f'<div class="row"><span class="label">reference</span><span class="ref">{esc(s.reference)}</span></div>'
        )
    for w in s.warnings:
        rows.append(f'<div class="row meta">{esc(w)}</div>')
    kind = "" if s.correct is None else (" correct" if s.correct else " error")
    kind += " unexplained" if s.error is not None else ""
    return f'<section class="sentence{kind}" id="s{sid}" data-id="{sid}">\n' + "\n".join(rows) + "\n</section>"


def sort_errors_first(sentences: Sequence[SentenceExplanation]) -> List[SentenceExplanation]:
    """Wrong hypotheses first (then sentences without a reference, then correct ones), each group in input order."""
    rank = {False: 0, None: 1, True: 2}
    return sorted(sentences, key=lambda s: rank[s.correct])


def render_html(
    sentences: Sequence[SentenceExplanation], title: str = "Why each output word was chosen", subtitle: str = ""
) -> str:
    """A self-contained page: every output token coloured by its larger branch (orange: from the lexicon, blue:
    written), hover text (title attribute) naming the source word, the lexicon entry and the numbers; errors first
    when references are known."""
    esc = html.escape
    ordered = sort_errors_first(sentences)
    n_err = sum(s.correct is False for s in sentences)
    n_ref = sum(s.correct is not None for s in sentences)
    n_unexplained = sum(s.error is not None for s in sentences)
    toks = [t for s in sentences for t in s.tokens if not (t.token == "</s>" and t.position == len(s.tokens) - 1)]
    n_lex = sum(t.origin == "lexicon" for t in toks)
    stats = (
        f"{len(sentences)} sentences"
        + (f", {n_err} wrong of {n_ref} with a reference (listed first)" if n_ref else "")
        + f"; {n_lex} of {len(toks)} output tokens ({100.0 * n_lex / max(1, len(toks)):.1f}%) taken from the "
        "lexicon" + (f"; {n_unexplained} sentence(s) could not be explained (each says why)" if n_unexplained else "")
    )
    legend = (
        f'<span class="tok lexicon" style="background: {_rgba(LEXICON_RGB, 1.0)}">from the lexicon</span>'
        f'<span class="tok written" style="background: {_rgba(WRITTEN_RGB, 1.0)}">written by the decoder</span>'
        " pale = the two branches about equal, strong = one branch holds almost all of p(y); hover a word "
        "for its source word, lexicon entry and numbers; an underlined source word was translated by the "
        "lexicon."
    )
    body = "\n".join(_sentence_html(s, i) for i, s in enumerate(ordered))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{PAGE_MARKER}<title>{esc(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n<h1>{esc(title)}</h1>\n"
        + (f'<p class="meta">{esc(subtitle)}</p>\n' if subtitle else "")
        + f'<p class="meta" id="stats">{esc(stats)}</p>\n'
        '<p class="meta">p(y) = p_gate p_write(y) + (1 - p_gate) &Sigma;<sub>j</sub> &alpha;<sub>j</sub> '
        "L[x<sub>j</sub>, y]: a word is <b>from the lexicon</b> when the second term is the larger.</p>\n"
        f'<p class="legend meta">{legend}</p>\n{body}\n</body></html>\n'
    )
