#!/usr/bin/env python
"""Our `lex_lstm` and the authors' released code (ekinakyurek/lexical, read from
../shared/reference/ekinakyurek-lexical, never copied here) trained side by side, update for update: the same initial
weights copied both ways, the same batches, the same optimiser and learning rates. Per update, for both codes: the loss
(as each reduces it: theirs `EncDec.forward`, ours `lexical_cross_entropy --sentence-avg` / its sample size), the
gradient norm before clipping, the mean p_gate (the weight of p_write) over target tokens, and after the update the
largest absolute difference between corresponding parameters.

    python examples/scan/authors_lockstep.py --data ../shared/data/scan --split jump --dim 512 --updates 100 \\
        --batch-size 64 --init theirs --dropout off --dtype float64 --seed 1 --json OUT.json

The models: their EncDec (the `pyx` of their Mutex; unidirectional, source attention, n_layers, `--dim` units, copy
on, their Simple lexicon through main.py's `tranlate_with_alignerv2`) and our `lex_lstm` with the recipes'
authors' options (fairseq_lexical_recipes.families.AUTHORS_DECODER + AUTHORS_GATE), `--exclude-special-outputs`,
`--dim` units and
the same alignments as our lexicon file with `--lexicon-top-k 1`. Vocabularies: the training pairs' words, in the
order they occur (their `Vocab`, our dictionaries). Sources are `<s> x </s>` in both, as theirs.

Dropout `on`: 0.4 in both (`--dropout`), their `--highdrop` (0.5) and our `--write-dropout 0.5`, as their
exp/SCAN/simple.sh sets it. The two codes draw their masks in different orders and shapes (their LSTMs draw the
between-layer masks inside torch's nn.LSTM), so with dropout on the runs are compared as two curves, not value for
value. Each code's masks are drawn after `torch.manual_seed(f(--seed, update))`, so each curve is reproducible alone.

Learning rate: fairseq's inverse_sqrt with --warmup-init-lr 0, as fairseq-train runs it: update n (from 1) at
peak * (n - 1) / warmup during warm-up (the first update at 0), then peak * sqrt(warmup / (n - 1)). Adam (0.9, 0.998),
eps 1e-8 (torch.optim.Adam) and global gradient-norm clipping (torch.nn.utils.clip_grad_norm_) for both.

Known differences of their decoder that are switched off by default so that the models can agree to rounding
(docs/authors_code.md): their EPS (1e-7 added to every mixture probability; --their-eps 1e-7 restores it) and the
+99999 on </s> at step MAXLEN - 1 (--their-maxlen; main.py's is the longest target + 1, 49 on SCAN).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import random
import re
import sys
import tempfile
import time
import types
from typing import Dict, List, Optional, Sequence, Tuple

EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(EXAMPLES)
REFERENCE = os.path.join(os.path.dirname(REPO), "shared", "reference", "ekinakyurek-lexical")
SCAN_DATA = os.path.join(os.path.dirname(REPO), "shared", "data", "scan")
# split -> (training file, folder of the authors' alignment files under lexicon_akyurek2021/)
SPLITS = {
    "jump": ("tasks_train_addprim_jump.txt", "add_prim_split"),
    "around_right": ("tasks_train_template_around_right.txt", "template_split"),
}
ALIGNMENT_FILE = "simple.align.v3.json"
SCAN_LINE = re.compile(r"^IN:\s(.*?)\sOUT: (.*?)$")  # their main.py's
HIGHDROP = 0.5  # their --highdropvalue, which exp/SCAN/simple.sh uses with --highdrop


class BadInput(Exception):
    """A missing folder or file, an unknown split, a malformed line: the message names it."""


# -- the authors' code ------------------------------------------------------------------------------------------

_AUTHORS: Dict[str, types.SimpleNamespace] = {}
THEIR_MODULES = ("data", "main", "src", "mutex", "hlog")  # their top-level names, looked up in their folder only


class _TheirModules(importlib.abc.MetaPathFinder):
    """Resolves only their top-level module names, in their folder (not by putting it on sys.path, which would
    let it shadow any other module while they are imported)."""

    def __init__(self, folder: str):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in THEIR_MODULES or path is not None:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.folder])


def import_authors(reference: str = REFERENCE) -> types.SimpleNamespace:
    """Their modules, imported from the reference folder, without side effects: main.py (for tranlate_with_alignerv2
    and its flags) imports nltk and seaborn for evaluation and plots only, stubbed here; their top-level module names
    (data, src, main, mutex, hlog) are removed from sys.modules again, and matplotlib's settings that main.py changes
    restored. Their absl flags are marked as parsed (their defaults: highdrop off, soft_align off, ...). Imported once
    per process and folder."""
    reference = os.path.abspath(reference)
    if reference in _AUTHORS:
        return _AUTHORS[reference]
    if not os.path.isdir(reference):
        raise BadInput(f"{reference} is absent: the authors' code (ekinakyurek/lexical) is read from there")
    import matplotlib

    saved_rc = dict(matplotlib.rcParams)
    stubs = {
        "nltk": types.ModuleType("nltk"),
        "nltk.translate": types.ModuleType("nltk.translate"),
        "nltk.translate.bleu_score": types.ModuleType("nltk.translate.bleu_score"),
        "seaborn": types.ModuleType("seaborn"),
    }
    stubs["nltk.translate.bleu_score"].corpus_bleu = None
    stubs["seaborn"].set = lambda *a, **k: None
    added = [name for name in stubs if name not in sys.modules]
    sys.modules.update({name: stubs[name] for name in added})
    finder = _TheirModules(reference)
    sys.meta_path.insert(0, finder)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # their hlog.py prints its logger's handlers
            import data as their_data
            import main as their_main
            import src as their_src
        from absl import flags

        flags.FLAGS.mark_as_parsed()
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] in THEIR_MODULES]:
            del sys.modules[name]
        for name in added:
            del sys.modules[name]
        matplotlib.rcParams.update(saved_rc)
    _AUTHORS[reference] = types.SimpleNamespace(
        EncDec=their_src.EncDec,
        Vocab=their_src.Vocab,
        collate=their_data.collate,
        decoder=their_src.decoder,
        aligner=their_main.tranlate_with_alignerv2,
        FLAGS=flags.FLAGS,
        path=reference,
    )
    return _AUTHORS[reference]


# -- the map between the two models -----------------------------------------------------------------------------


def row_map(their_vocab, our_dict, decoder_input=False):
    """our id -> their id, for the rows of embeddings and output layers. Their sentences start with <s> on both
    sides; fairseq's decoder starts from </s> (so on the decoder's input side our </s> is their <s>) and its source
    has no <s>: `batches` adds one, and on the source side our <s> is theirs."""
    m = {
        our_dict.pad(): their_vocab.pad(),
        our_dict.eos(): their_vocab.eos(),
        our_dict.bos(): their_vocab.sos(),
        our_dict.unk(): their_vocab.unk(),
    }
    if decoder_input:
        m[our_dict.eos()], m[our_dict.bos()] = their_vocab.sos(), their_vocab.eos()
    m.update({i: their_vocab[our_dict[i]] for i in range(our_dict.nspecial, len(our_dict))})
    return m


def parameter_map(theirs, source_rows, target_rows, input_rows, copy_id, n_layers=2):
    """our parameter name -> (their tensor, rows of ours -> rows of theirs, or None: the whole tensor)."""
    dec = theirs.decoder
    out = {
        "encoder.embed_tokens.weight": (theirs.encoder.embed.weight, source_rows),
        "decoder.embed_tokens.weight": (dec.embed.weight, input_rows),
        "decoder.attention.input_proj.weight": (dec.attention_0.make_query.weight, None),  # the query W_q h_t + b
        "decoder.attention.input_proj.bias": (dec.attention_0.make_query.bias, None),
        "decoder.attention.output_proj.weight": (dec.combine.weight, None),  # o_t = W [e; o_t-1; h_t; c_t] + b
        "decoder.attention.output_proj.bias": (dec.combine.bias, None),
        "decoder.fc_out.weight": (dec.predict.weight, target_rows),
        "decoder.fc_out.bias": (dec.predict.bias, target_rows),
    }
    for layer in range(n_layers):
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            out[f"encoder.lstm.{kind}_l{layer}"] = (getattr(theirs.encoder.rnn, f"{kind}_l{layer}"), None)
            out[f"decoder.layers.{layer}.{kind}"] = (getattr(dec.rnn, f"{kind}_l{layer}"), None)
    if copy_id is not None:  # the gate is p_write's <copy> word (--gate-form copy-token on o_t)
        out["decoder.lexical_head.gate.weight"] = (dec.predict.weight, {0: copy_id})
        out["decoder.lexical_head.gate.bias"] = (dec.predict.bias, {0: copy_id})
    return out


def copy_weights(ours, mapping):
    """Their weights into ours, through the map."""
    params = dict(ours.named_parameters())
    with import_torch().no_grad():
        for name, (value, rows) in mapping.items():
            if rows is None:
                params[name].copy_(value)
            else:
                for o, t in rows.items():
                    params[name][o] = value[t]


def copy_weights_to_theirs(ours, mapping):
    """Our weights into theirs, through the map reversed (their rows and tensors outside it are left as they are:
    see `unmapped`)."""
    params = dict(ours.named_parameters())
    with import_torch().no_grad():
        for name, (value, rows) in mapping.items():
            if rows is None:
                value.copy_(params[name])
            else:
                for o, t in rows.items():
                    value[t] = params[name][o]


def unmapped(theirs, mapping, vocabs) -> List[dict]:
    """Their parameters, and rows of them, that no parameter of ours corresponds to: {parameter, rows (their words,
    or "all")}."""
    vx, vy = vocabs
    covered: Dict[int, set] = {}
    whole = set()
    for value, rows in mapping.values():
        if rows is None:
            whole.add(id(value))
        else:
            covered.setdefault(id(value), set()).update(rows.values())
    words = {id(theirs.encoder.embed.weight): vx}
    out = []
    for name, p in theirs.named_parameters():
        if id(p) in whole:
            continue
        if id(p) not in covered:
            out.append({"parameter": name, "rows": "all"})
            continue
        missing = sorted(set(range(p.size(0))) - covered[id(p)])
        if missing:
            vocab = words.get(id(p), vy)
            out.append({"parameter": name, "rows": [vocab.get(i) for i in missing]})
    return out


def max_parameter_difference(ours, mapping) -> float:
    """max |ours - theirs| over every corresponding entry."""
    torch = import_torch()
    params = dict(ours.named_parameters())
    worst = 0.0
    with torch.no_grad():
        for name, (value, rows) in mapping.items():
            if rows is None:
                d = (params[name] - value).abs().max()
            else:
                o, t = zip(*rows.items())
                d = (params[name][list(o)] - value[list(t)]).abs().max()
            worst = max(worst, float(d))
    return worst


# -- the two models, built for the same words --------------------------------------------------------------------


def import_torch():
    import torch

    return torch


def authors_options(lexical: bool) -> List[str]:
    """The recipes' `--decoder authors` options (fairseq_lexical_recipes.families: the LSTM rows')."""
    from fairseq_lexical_recipes.families import AUTHORS_DECODER, AUTHORS_GATE

    return [*AUTHORS_DECODER, *(AUTHORS_GATE if lexical else ())]


def build_both(
    authors,
    source_words: Sequence[str],
    target_words: Sequence[str],
    folder,
    *,
    dim: int,
    n_layers: int = 2,
    dropout: float = 0.4,
    lexicon: Optional[str] = None,
    exclude_specials: bool = True,
    write_dropout: float = 0.0,
    dropout_placement: str = "fairseq",
    init: str = "theirs",
    seed: int = 0,
    maxlen: int = 100,
):
    """Their EncDec and our model for the same words, with the same weights; both in float32 (the caller casts).

    lexicon: None (the plain LSTM: our `lstm_plain`, their copy off), "identity" (their copy_translation_cogs, ours
    `--lexicon identity`) or the path of an alignment file in their format ({source: {target: count}}; theirs through
    their tranlate_with_alignerv2, ours the same alignments as a lexicon file in `folder` with `--lexicon-top-k 1`).
    init: "theirs" (torch's defaults, their EncDec, copied into ours) or "ours" (`--weight-init fairseq`, copied into
    theirs through the map reversed). `folder` receives the dictionaries (dict.src.txt, dict.tgt.txt) and the lexicon.
    Their --highdropvalue is read when their decoder is built: set authors.FLAGS before. Returns (theirs, ours,
    (their vocab x, y), (our source, target dictionary), mapping)."""
    import numpy as np
    import torch

    folder = str(folder)
    vx, vy = authors.Vocab(), authors.Vocab()
    for w in source_words:
        vx.add(w)
    for w in target_words:
        vy.add(w)

    def build_theirs():
        # MAXLEN: their decoder forces </s> at step MAXLEN - 1 (main.py: the longest target + 1)
        return authors.EncDec(
            vx,
            vy,
            dim,
            dim,
            copy=lexicon is not None,
            n_layers=n_layers,
            dropout=dropout,
            bidirectional=False,
            MAXLEN=maxlen,
            source_att=True,
        )

    extra = []
    if lexicon == "identity":
        extra = ["--lexicon", "identity"]
    elif lexicon is not None:
        with open(lexicon) as f:
            alignment = json.load(f)
        path = os.path.join(folder, "lexicon.tsv")  # the same alignments, as our lexicon file
        with open(path, "w") as f:
            f.write("".join(f"{s}\t{t}\t{n}\n" for s, row in alignment.items() for t, n in row.items()))
        extra = ["--lexicon", path, "--lexicon-top-k", "1"]
    for side, words in (("src", source_words), ("tgt", target_words)):
        with open(os.path.join(folder, f"dict.{side}.txt"), "w") as f:
            f.write("".join(f"{w} 1\n" for w in words))
    sizes = [
        a
        for name in (
            "encoder-embed-dim",
            "decoder-embed-dim",
            "encoder-hidden-size",
            "decoder-hidden-size",
            "decoder-out-embed-dim",
        )
        for a in (f"--{name}", str(dim))
    ]
    torch.manual_seed(seed)
    if init == "theirs":
        theirs = build_theirs()
    from fairseq_lexical.analysis.checkpoints import build_model

    ours, task, args = build_model(
        folder,
        "--arch",
        "lstm_plain" if lexicon is None else "lex_lstm",
        *sizes,
        "--encoder-layers",
        n_layers,
        "--decoder-layers",
        n_layers,
        "--dropout",
        dropout,
        *(["--write-dropout", write_dropout] if write_dropout else []),
        "--dropout-placement",
        dropout_placement,
        "--weight-init",
        "fairseq",
        *authors_options(lexicon is not None),
        *(["--exclude-special-outputs"] if exclude_specials else []),
        *extra,
        "--criterion",
        "lexical_cross_entropy",
        "--sentence-avg",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
    )
    if init == "ours":
        theirs = build_theirs()
    if lexicon == "identity":
        proj = np.zeros((len(vx), len(vy)), dtype=np.float32)  # main.py's copy_translation_cogs
        for i, word in enumerate(vx._contents):
            if word in vy:
                proj[i, vy[word]] = 1.0
        theirs.decoder.copy_translation = np.argmax(proj, axis=1)
    elif lexicon is not None:
        theirs.decoder.copy_translation = authors.aligner(lexicon, vx, vy)
    ours.criterion = task.build_criterion(args)  # the recipes' loss: summed over tokens, averaged over sentences
    sd, td = task.source_dictionary, task.target_dictionary
    mapping = parameter_map(
        theirs,
        row_map(vx, sd),
        row_map(vy, td),
        row_map(vy, td, decoder_input=True),
        vy.copy() if lexicon is not None else None,
        n_layers=n_layers,
    )
    missing = sorted(set(dict(ours.named_parameters())) ^ set(mapping))
    if missing:
        raise RuntimeError(f"parameters of ours without a counterpart in the map (or the reverse): {missing}")
    if init == "theirs":
        copy_weights(ours, mapping)
    else:
        copy_weights_to_theirs(ours, mapping)
    return theirs, ours, (vx, vy), (sd, td), mapping


# -- one batch in both formats, and the losses -------------------------------------------------------------------


def batches(pairs, vocabs, dicts, authors):
    """Their batch (collate: sorted by source length, <s> ... </s> on both sides, time-major) and ours in the same
    order (left-padded source with the <s> theirs has, prev_output_tokens from </s>, right-padded target).
    pairs: (source, target) strings of space-separated words."""
    import torch

    (vx, vy), (sd, td) = vocabs, dicts
    inp, out, lens = authors.collate(
        [
            ([vx.sos()] + vx.encode(s.split()) + [vx.eos()], [vy.sos()] + vy.encode(t.split()) + [vy.eos()])
            for s, t in pairs
        ]
    )
    order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0].split()))  # collate's order (stable)
    src_len = max(len(s.split()) for s, _ in pairs) + 2
    tgt_len = max(len(t.split()) for _, t in pairs) + 1
    src = torch.full((len(pairs), src_len), sd.pad())
    prev = torch.full((len(pairs), tgt_len), td.pad())
    tgt = torch.full((len(pairs), tgt_len), td.pad())
    for b, i in enumerate(order):
        s, t = pairs[i]
        ids = [sd.bos()] + [sd.index(w) for w in s.split()] + [sd.eos()]
        src[b, src_len - len(ids) :] = torch.tensor(ids)
        y = [td.index(w) for w in t.split()] + [td.eos()]
        tgt[b, : len(y)] = torch.tensor(y)
        prev[b, : len(y)] = torch.tensor([td.eos()] + y[:-1])
    lengths = src.ne(sd.pad()).sum(1)
    return (inp, out, lens), (src, lengths, prev, tgt)


def our_loss(ours, src, lengths, prev, tgt, pad):
    """lexical_cross_entropy with --sentence-avg (the recipes'), divided by its sample size as fairseq's trainer
    does: summed over target tokens, averaged over sentences."""
    import torch

    sample = {
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
        "target": tgt,
        "ntokens": int(tgt.ne(pad).sum()),
        "nsentences": src.size(0),
        "id": torch.arange(src.size(0)),
    }
    loss, sample_size, _ = ours.criterion(ours, sample)
    return loss / sample_size


class TheirGate:
    """Their p_gate, the weight of p_write: 1 - softmax(pred_logits)[<copy>] at every step of their decoder (a
    forward hook on `decoder.predict`), averaged over target tokens."""

    def __init__(self, theirs):
        self.logits: List = []
        self.copy = theirs.vocab_y.copy()
        self.pad = theirs.vocab_y.pad()
        theirs.decoder.predict.register_forward_hook(lambda module, args, output: self.logits.append(output.detach()))

    def mean(self, out) -> float:
        import torch

        logits, self.logits = torch.stack(self.logits), []  # T x B x V
        p_write = 1.0 - torch.softmax(logits.double(), dim=-1)[..., self.copy]
        return float(p_write[out[1:].ne(self.pad)].mean())


class OurGate:
    """Our p_gate (the decoder's extra["p_gate"], B x T; a forward hook on the decoder, in the model's precision:
    the criterion logs it in float32), averaged over target tokens."""

    def __init__(self, ours):
        self.p_gate = None
        ours.decoder.register_forward_hook(lambda module, args, output: setattr(self, "p_gate", output[1]["p_gate"]))

    def mean(self, tgt, pad) -> float:
        p_gate, self.p_gate = self.p_gate.detach(), None
        return float(p_gate.double()[tgt.ne(pad)].mean())


# -- the lockstep run --------------------------------------------------------------------------------------------


def read_scan(path: str) -> List[Tuple[str, str]]:
    """SCAN pairs (`IN: ... OUT: ...` lines, their main.py's pattern)."""
    if not os.path.isfile(path):
        raise BadInput(f"{path} is absent (the SCAN training file)")
    pairs = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            m = SCAN_LINE.match(line.rstrip("\n"))
            if m is None:
                raise BadInput(f"{path}:{lineno}: not a SCAN line (IN: ... OUT: ...)")
            pairs.append((m.group(1), m.group(2)))
    if not pairs:
        raise BadInput(f"{path} holds no SCAN pairs")
    return pairs


def words_in_order(sentences) -> List[str]:
    seen = {}
    for s in sentences:
        for w in s.split():
            seen.setdefault(w, None)
    return list(seen)


def fairseq_inverse_sqrt(update: int, peak: float, warmup: int) -> float:
    """The rate of update `update` (from 1) under fairseq's inverse_sqrt (fairseq/optim/lr_scheduler/
    inverse_square_root_schedule.py) with --warmup-init-lr 0: fairseq-train sets the rate after each update from the
    number of updates done, so update n runs at step_update(n - 1), the first at 0."""
    n = update - 1
    if n < warmup:
        return 0.0 + n * ((peak - 0.0) / warmup)
    return peak * warmup**0.5 * n**-0.5


def batch_sequence(n_pairs: int, batch_size: int, seed: int):
    """Indices of the training pairs, batch after batch: a seeded permutation per epoch, cut into batches of
    batch_size (a shorter last batch is dropped), as a shuffling DataLoader."""
    rng = random.Random(seed)
    while True:
        order = list(range(n_pairs))
        rng.shuffle(order)
        for start in range(0, n_pairs - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def run(args, progress=print, on_update=None) -> dict:
    """The lockstep run of the parsed command line; returns what --json writes. on_update: called with that
    (so far) after every update."""
    import torch

    if args.split not in SPLITS:
        raise BadInput(f"unknown split {args.split!r} (one of {', '.join(SPLITS)})")
    train_name, align_folder = SPLITS[args.split]
    train_file = os.path.join(args.data, train_name)
    alignment = args.alignment or os.path.join(args.data, "lexicon_akyurek2021", align_folder, ALIGNMENT_FILE)
    authors = import_authors(args.reference)
    pairs = read_scan(train_file)
    if not os.path.isfile(alignment):
        raise BadInput(f"{alignment} is absent (the authors' Simple alignment file)")
    if args.batch_size > len(pairs):
        raise BadInput(f"--batch-size {args.batch_size} exceeds the {len(pairs)} pairs of {train_file}")
    dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]
    dropout_on = args.dropout == "on"
    rtol = args.rtol if args.rtol is not None else (1e-6 if dtype == torch.float64 else 1e-4)

    flags = authors.FLAGS
    saved = (flags.highdrop, flags.highdropvalue, authors.decoder.EPS)
    flags.highdrop, flags.highdropvalue = dropout_on, HIGHDROP
    authors.decoder.EPS = args.their_eps
    try:
        with tempfile.TemporaryDirectory() as folder:
            theirs, ours, vocabs, dicts, mapping = build_both(
                authors,
                words_in_order(s for s, _ in pairs),
                words_in_order(t for _, t in pairs),
                folder,
                dim=args.dim,
                n_layers=args.layers,
                dropout=0.4 if dropout_on else 0.0,
                lexicon=alignment,
                write_dropout=HIGHDROP if dropout_on else 0.0,
                dropout_placement=args.dropout_placement,
                init=args.init,
                seed=args.seed,
                maxlen=args.their_maxlen,
            )
        theirs, ours = theirs.to(dtype).train(), ours.to(dtype).train()
        without = unmapped(theirs, mapping, vocabs)
        progress(
            f"{args.split}: {len(pairs)} pairs, source words {len(vocabs[0])}, target words {len(vocabs[1])} "
            f"(their vocabularies, 5 specials); dim {args.dim} x {args.layers} layers; init {args.init}; "
            f"dropout {args.dropout}; {args.dtype}"
        )
        for item in without:
            rows = item["rows"] if item["rows"] == "all" else "rows " + ", ".join(item["rows"])
            progress(f"  their {item['parameter']} ({rows}): no counterpart in ours, left at torch's initial values")
        their_gate, our_gate = TheirGate(theirs), OurGate(ours)
        betas, eps = (0.9, 0.998), 1e-8
        opt_theirs = torch.optim.Adam(theirs.parameters(), lr=0.0, betas=betas, eps=eps)
        opt_ours = torch.optim.Adam(ours.parameters(), lr=0.0, betas=betas, eps=eps)
        pad = dicts[1].pad()
        records = []
        first_part = None
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update(
            train_file=train_file,
            alignment_file=alignment,
            optimizer={"name": "torch.optim.Adam", "betas": betas, "eps": eps},
            lr_schedule="fairseq's inverse_sqrt, --warmup-init-lr 0: update n at step_update(n - 1)",
            dropout_sites={
                "ours": ["--dropout 0.4", f"--write-dropout {HIGHDROP}"],
                "theirs": ["dropout 0.4", "highdrop"],
            }
            if dropout_on
            else "off (p = 0 in both, train mode)",
            masks="each code its own, drawn after torch.manual_seed(seed * 1000003 + update)" if dropout_on else None,
            source_words=len(vocabs[0]),
            target_words=len(vocabs[1]),
        )
        unmapped_theirs = [{**item, "set_to": "their own initial values (torch's defaults)"} for item in without]

        def result():
            n = len(records)
            summary = {
                "updates": n,
                "seconds_per_update": sum(r["ours"]["seconds"] + r["theirs"]["seconds"] for r in records) / max(n, 1),
                "max_loss_rel_diff": max((r["loss_rel_diff"] for r in records), default=0.0),
                "max_gnorm_rel_diff": max((r["gnorm_rel_diff"] for r in records), default=0.0),
                "max_p_gate_abs_diff": max((r["p_gate_abs_diff"] for r in records), default=0.0),
                "rtol": rtol,
                "first_update_parted": first_part,
                "final_param_diff": records[-1]["param_diff"] if records else 0.0,
            }
            return {"config": config, "unmapped_theirs": unmapped_theirs, "summary": summary, "updates": records}

        order = batch_sequence(len(pairs), args.batch_size, args.seed)
        for update in range(1, args.updates + 1):
            lr = fairseq_inverse_sqrt(update, args.lr, args.warmup)
            batch = [pairs[i] for i in next(order)]
            (inp, out, lens), (src, lengths, prev, tgt) = batches(batch, vocabs, dicts, authors)
            mask_seed = args.seed * 1_000_003 + update
            start = time.perf_counter()

            torch.manual_seed(mask_seed)
            opt_theirs.zero_grad()
            their_loss = theirs(inp, out, lens=lens)
            their_loss.backward()
            their_pgate = their_gate.mean(out)
            their_gnorm = float(torch.nn.utils.clip_grad_norm_(theirs.parameters(), args.clip_norm))
            for group in opt_theirs.param_groups:
                group["lr"] = lr
            opt_theirs.step()
            middle = time.perf_counter()

            torch.manual_seed(mask_seed)
            opt_ours.zero_grad()
            loss = our_loss(ours, src, lengths, prev, tgt, pad)
            loss.backward()
            our_pgate = our_gate.mean(tgt, pad)
            our_gnorm = float(torch.nn.utils.clip_grad_norm_(ours.parameters(), args.clip_norm))
            for group in opt_ours.param_groups:
                group["lr"] = lr
            opt_ours.step()
            end = time.perf_counter()

            record = {
                "update": update,
                "lr": lr,
                "ntokens": int(tgt.ne(pad).sum()),
                "ours": {
                    "loss": float(loss.detach()),
                    "gnorm": our_gnorm,
                    "p_gate": our_pgate,
                    "seconds": end - middle,
                },
                "theirs": {
                    "loss": float(their_loss.detach()),
                    "gnorm": their_gnorm,
                    "p_gate": their_pgate,
                    "seconds": middle - start,
                },
                "param_diff": max_parameter_difference(ours, mapping),
            }
            record["loss_rel_diff"] = relative(record["ours"]["loss"], record["theirs"]["loss"])
            record["gnorm_rel_diff"] = relative(our_gnorm, their_gnorm)
            record["p_gate_abs_diff"] = abs(our_pgate - their_pgate)
            if first_part is None and record["loss_rel_diff"] > rtol:
                first_part = update
            records.append(record)
            o, t = record["ours"], record["theirs"]
            if on_update is not None:
                on_update(result())
            progress(
                f"update {update:4d} lr {lr:.3e} | loss {o['loss']:.6f} / {t['loss']:.6f} "
                f"(rel {record['loss_rel_diff']:.1e}) | gnorm {o['gnorm']:.4f} / {t['gnorm']:.4f} | "
                f"p_gate {o['p_gate']:.4f} / {t['p_gate']:.4f} | max|dparam| {record['param_diff']:.1e} | "
                f"{o['seconds']:.1f}s / {t['seconds']:.1f}s (ours / theirs)"
            )
    finally:
        flags.highdrop, flags.highdropvalue, authors.decoder.EPS = saved
    out = result()
    summary = out["summary"]
    comparison = "value for value" if not dropout_on else "as curves (each code draws its own dropout masks)"
    progress(
        f"{summary['updates']} updates, {summary['seconds_per_update']:.1f} s per update (both codes); compared "
        f"{comparison}: max relative loss difference {summary['max_loss_rel_diff']:.2e}, first update beyond "
        f"{rtol:g}: {first_part if first_part is not None else 'none'}; final max|dparam| "
        f"{summary['final_param_diff']:.2e}"
    )
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python examples/scan/authors_lockstep.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", default=SCAN_DATA, help=f"the SCAN folder (default: {SCAN_DATA})")
    p.add_argument("--split", default="jump", help=f"one of {', '.join(SPLITS)} (default: jump)")
    p.add_argument(
        "--alignment",
        help="their alignment file (default: DATA/lexicon_akyurek2021/add_prim_split or template_split/"
        f"{ALIGNMENT_FILE})",
    )
    p.add_argument("--reference", default=REFERENCE, help=f"the authors' code (default: {REFERENCE})")
    p.add_argument("--dim", type=int, default=512, help="embedding and hidden units, their --dim (default: 512)")
    p.add_argument("--layers", type=int, default=2, help="LSTM layers, their --n_layers (default: 2)")
    p.add_argument("--updates", type=int, default=100, help="updates (default: 100)")
    p.add_argument("--batch-size", type=int, default=64, help="training pairs per update (default: 64)")
    p.add_argument(
        "--init",
        choices=["theirs", "ours"],
        default="theirs",
        help="theirs: their EncDec's initial weights (torch's defaults) copied into ours; ours: our model's "
        "(--weight-init fairseq, --embedding-init normal) copied into theirs (default: theirs)",
    )
    p.add_argument(
        "--dropout",
        choices=["off", "on"],
        default="off",
        help="off: none anywhere; on: 0.4 in both, their --highdrop 0.5 and our --write-dropout 0.5 (default: off)",
    )
    p.add_argument(
        "--dropout-placement",
        choices=["fairseq", "authors"],
        default="fairseq",
        help="our --dropout-placement (the recipes': fairseq, the default; authors: as their code)",
    )
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="(default: float64)")
    p.add_argument("--seed", type=int, default=1, help="initial weights, batches and dropout masks (default: 1)")
    p.add_argument("--lr", type=float, default=0.000698771, help="peak learning rate (default: 0.000698771)")
    p.add_argument("--warmup", type=int, default=400, help="warm-up updates (default: 400)")
    p.add_argument("--clip-norm", type=float, default=5.0, help="global gradient-norm clipping (default: 5)")
    p.add_argument(
        "--their-eps",
        type=float,
        default=1e-300,
        help="their decoder's EPS, added to every mixture probability (their code: 1e-7; default 1e-300, i.e. off)",
    )
    p.add_argument(
        "--their-maxlen",
        type=int,
        default=1000,
        help="their MAXLEN: +99999 on </s> at step MAXLEN - 1 (main.py: the longest target + 1, 49 on SCAN; "
        "default 1000, i.e. never on SCAN)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        help="relative loss difference reported as the codes parting (default: 1e-6 in float64, 1e-4 in float32)",
    )
    p.add_argument("--json", help="write the configuration, every update's numbers and the summary to this file")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)

    def fail(message):
        print(f"{p.prog}: error: {message}", file=sys.stderr)
        return 2

    if min(args.dim, args.layers, args.updates, args.batch_size, args.warmup) < 1:
        return fail("--dim, --layers, --updates, --batch-size and --warmup must be >= 1")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        return fail(f"--json {args.json}: its folder {os.path.dirname(os.path.abspath(args.json))} is absent")
    import logging

    import torch

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # (the lexicon's summary, fairseq_lexical's, stays)
    torch.set_num_threads(1)

    def write(result):
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")

    try:  # --json is rewritten after every update: a run cut short keeps what it did
        write(run(args, progress=lambda line: print(line, flush=True), on_update=write))
    except BadInput as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
