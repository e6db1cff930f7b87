"""Why each output word was chosen, over a test set: per hypothesis token p_gate, the probability from the lexicon
branch and from the write branch (their sum is the model's p), the source position with the most lexical mass and
the lexicon entry used. JSON lines, and an HTML page.

    # the hypotheses of fairseq-generate (its S and H lines; T lines or --reference give the references)
    fairseq-lexical-explain data-bin --path checkpoints/checkpoint_last.pt --generate-output generate.txt \\
        -o explain.jsonl --html explain.html
    # raw source lines (tokenised as the training data), decoded here by beam search
    fairseq-lexical-explain data-bin --path checkpoints/checkpoint_last.pt --source test.src \\
        --reference test.tgt -o explain.jsonl --html explain.html

Each JSON line is one sentence: source_tokens and output_tokens (both ending in </s>), translation, reference,
correct, score, warnings, error (null, or why the sentence could not be explained; its `tokens` are then empty),
and `tokens`, one object per output token with
  p, log_p        the model's probability of the token (get_normalized_probs)
  p_gate          the weight of the write distribution (eq. 6)
  write, lexicon  p_gate * p_write(y) and (1 - p_gate) * p_lex(y), whose sum is p (eqs. 9, 10)
  origin          "lexicon" when the lexicon branch is the larger, else "written"; lexicon_share = lexicon / p
  source_position, source_word, attention, lexical_mass
                  argmax_j alpha_j L[x_j, y]: the source word giving the most lexical mass, its attention and mass
  entry           {source, target, weight}: the lexicon entry x_j -> y and L[x_j, y] (null when no row holds y)
  renormalization 1, or the factor both branches carry where the model masks words at inference (see below)
The page colours each output token by its larger branch (orange: lexicon, blue: written), names the source word
and entry in its hover text, and lists wrong hypotheses first when references are known.

The model is prepared for inference as fairseq-generate prepares it, so the numbers are those of decoding; where
the model renormalises its output at inference (a word's probability set to 0), both branches are divided by the
mass left (`renormalization`), so that they still add up to p.

A sentence that cannot be explained (e.g. a step where the mixture's whole mass is on masked words, so that the
model's numbers there are not defined) is reported, on the page and in its JSON line, and the others are explained;
only when no sentence can be is it an error.

-o and --html replace a file that this tool wrote earlier (a page, JSON lines), never another: an input (the
checkpoint, the data directory's files, the text files given), the lexicon the checkpoint was trained with, or any
other existing file is refused, and so is a directory.

Hypotheses from --generate-output must be in the model's token space (fairseq-generate without --remove-bpe, or
the H lines). When the file has P lines (positional scores), they are compared with the teacher-forced scores: a
difference means the file was not produced by this checkpoint, and is reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Optional

from lexical_offline.beam_searches import add_beam_search_argument

PROG = "explain.py"
# fairseq-generate prints positional scores in base 2 with 4 decimals
P_TOLERANCE = 0.01
# the first line of an earlier -o file is read up to this many bytes (a record of a long sentence fits)
FIRST_LINE_LIMIT = 1 << 24


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the data-bin directory of fairseq-preprocess (the dictionaries)")
    p.add_argument("--path", required=True, help="the checkpoint (one model with a lexical head)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--generate-output", help="fairseq-generate output (S and H lines; T and P lines used when present)"
    )
    which.add_argument(
        "--source", help="source sentences, one per line, tokenised as the training data: decoded here with --beam"
    )
    p.add_argument("--reference", help="references, one per line in sample-id order (default: the T lines)")
    p.add_argument(
        "-o", "--output", required=True, help="JSON lines file (new, or one this tool wrote: no other file is replaced)"
    )
    p.add_argument("--html", help="also write the HTML page here (new, or a page this tool wrote)")
    p.add_argument("--title", help="title of the page (default: the checkpoint)")
    p.add_argument("--beam", type=int, default=5, help="with --source: beam size (default 5)")
    add_beam_search_argument(p)
    p.add_argument("--max-len-a", type=float, default=0.0, help="with --source: max length a*source length + b")
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--source-lang", help="override the checkpoint's source language suffix")
    p.add_argument("--target-lang", help="override the checkpoint's target language suffix")
    p.add_argument(
        "--lexicon-override",
        metavar="FILE",
        help="terms for this run (source<TAB>target<TAB>weight), as fairseq-generate's option (docs/terms.md)",
    )
    p.add_argument("--lexicon-override-gate-bias", type=float, default=0.0, help="with --lexicon-override")
    return p


def fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def is_explain_jsonl(path: str) -> bool:
    """Whether the file's first line is a record of this tool's -o."""
    with open(path, "rb") as f:
        first = f.readline(FIRST_LINE_LIMIT)
    try:
        record = json.loads(first)
    except ValueError:  # not JSON, or not UTF-8
        return False
    return isinstance(record, dict) and {"checkpoint", "source_tokens", "output_tokens", "tokens"} <= record.keys()


def output_problem(label: str, path: str, written_by_explain) -> Optional[str]:
    """Why the output ``path`` must not be written, or None: a directory, a path under a file, or an existing file
    that ``written_by_explain`` does not recognise (a mistyped path would replace a lexicon, a corpus, ...)."""
    if os.path.isdir(path):
        return f"{label} {path} is a directory: give the file to write"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{label} {path}: {parent} is not a directory"
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    try:
        ours = written_by_explain(path)
    except OSError as e:
        return f"{label} {path}: cannot read the existing file ({e.strerror or e})"
    if not ours:
        return (
            f"{label} {path} exists and was not written by this tool: refusing to replace it (remove it, or choose "
            "another path)"
        )
    return None


def tokens_of(ids, dictionary, text):
    """The tokens of ``ids`` (ending in </s>), else of ``text`` (split, and </s>), else none."""
    if ids is not None:
        return [dictionary[i] for i in ids.tolist()]
    return [] if text is None else text.split() + [dictionary.eos_word]


def write_output(label: str, path: str, write) -> Optional[str]:
    """``write(path)`` with the folders above it made; an OSError is returned as one line."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write(path)
    except OSError as e:
        return f"{label} {path}: {e.strerror or e}"
    return None


def sentences_from_generate_output(path: str, references):
    """(sample id, source text, hypothesis text, reference, P scores) in sample-id order."""
    from lexical_offline.metrics import GenerateOutputError, parse_generate_output

    try:
        gen = parse_generate_output(path, expected=None if references is None else len(references))
    except GenerateOutputError as e:
        raise ValueError(str(e)) from None
    if any(s is None for s in gen.sources):
        raise ValueError(f"{path}: no S lines (source sentences); run fairseq-generate without --quiet")
    refs = references if references is not None else gen.references
    return [(i, gen.sources[i], gen.hypotheses[i], refs[i], gen.positional_scores.get(i)) for i in range(len(gen))]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.beam < 1:
        return fail("--beam must be >= 1")
    # Checked before the (slow) fairseq import, so that these mistakes are answered at once.
    for what, path in (
        ("checkpoint", args.path),
        ("--generate-output", args.generate_output),
        ("--source", args.source),
        ("--reference", args.reference),
        ("--lexicon-override", args.lexicon_override),
    ):
        if path is not None and not os.path.isfile(path):
            return fail(f"{what} not found: {path}")
    if not os.path.isdir(args.data):
        return fail(f"data directory not found: {args.data}")
    from fairseq_lexical.analysis.explain import is_explain_page
    from lexical_offline.textio import directory_inputs, read_lines, refuse_overwriting_inputs, write_jsonl

    try:
        refuse_overwriting_inputs(
            {"-o": args.output, "--html": args.html},
            [
                ("--path", args.path),
                ("--generate-output", args.generate_output),
                ("--source", args.source),
                ("--reference", args.reference),
                ("--lexicon-override", args.lexicon_override),
                *directory_inputs("the data directory", args.data),
            ],
        )
        # after the inputs' check, whose message names the input: this one keeps any other file (the lexicon the
        # checkpoint was trained with, a corpus, ...) and an earlier output of this tool may be replaced
        for label, path, written_by_explain in (
            ("-o", args.output, is_explain_jsonl),
            ("--html", args.html, is_explain_page),
        ):
            problem = path and output_problem(label, path, written_by_explain)
            if problem:
                return fail(problem)
        references = None if args.reference is None else [" ".join(r.split()) for r in read_lines(args.reference)]
        if args.source is not None:
            sources = [" ".join(s.split()) for s in read_lines(args.source)]
            if not sources:
                return fail(f"{args.source}: empty file")
            empty = next((i for i, s in enumerate(sources, 1) if not s), None)
            if empty:
                return fail(f"{args.source}:{empty}: empty line")
            if references is not None and len(references) != len(sources):
                return fail(f"{args.reference} has {len(references)} lines but {args.source} has {len(sources)}")
            items = [(i, s, None, None if references is None else references[i], None) for i, s in enumerate(sources)]
        else:
            items = sentences_from_generate_output(args.generate_output, references)
    except ValueError as e:  # textio's errors and OutputOverwritesInputError
        return fail(str(e))

    from fairseq_lexical.analysis import explain as E
    from fairseq_lexical.analysis import gates
    from fairseq_lexical.compat import CheckpointLoadError

    try:
        model, task = gates.load_model(args.path, args.data, args.source_lang, args.target_lang)
        E.lexical_head_of(model)
        model.make_generation_fast_()  # as fairseq-generate prepares it: the numbers are those of decoding
    except gates.GateAnalysisError as e:
        return fail(f"{args.path}: {e}")
    except CheckpointLoadError as e:  # not a checkpoint: its message names the file
        return fail(str(e))
    if args.lexicon_override:
        from fairseq_lexical.modules.lexicon_override import apply_override

        try:
            apply_override(
                [model],
                args.lexicon_override,
                task.source_dictionary,
                task.target_dictionary,
                args.lexicon_override_gate_bias,
            )
        except ValueError as e:
            return fail(str(e))
    results, unexplained, mismatched, unknown = [], [], 0, 0
    for sample_id, source, hypothesis, reference, p_scores in items:
        src = tgt = score = None
        warnings = []
        try:
            src, warnings = gates.encode_tokens(source, task.source_dictionary, "source", allow_unk=True)
            unknown += bool(warnings)
            if hypothesis is None:
                tgt, score = gates.beam_decode(
                    model, task, src, args.beam, args.max_len_a, args.max_len_b, args.beam_search
                )
            else:
                # an empty hypothesis is </s> alone
                tgt = task.target_dictionary.encode_line(hypothesis, add_if_not_exist=False, append_eos=True).long()
            ex = E.explain_pair(
                model, task, src, tgt, sample_id=sample_id, reference=reference, score=score, warnings=warnings
            )
        except gates.GateAnalysisError as e:
            # this sentence only: the page and its JSON line say why, and the others are explained
            unexplained.append(f"sentence {sample_id}: {e}")
            ex = E.unexplained_sentence(
                tokens_of(src, task.source_dictionary, source),
                tokens_of(tgt, task.target_dictionary, hypothesis),
                str(e),
                sample_id=sample_id,
                reference=reference,
                score=score,
                warnings=warnings,
            )
        if p_scores is not None and ex.error is None:
            ours = [t.log_p / math.log(2) for t in ex.tokens]
            worst = max((abs(a - b) for a, b in zip(ours, p_scores)), default=0.0)
            if len(ours) != len(p_scores) or worst > P_TOLERANCE:
                mismatched += 1
                ex.warnings.append(
                    f"the generate output's token scores (P line) differ from this checkpoint's "
                    f"(largest difference {worst:.3g} bits): it was not produced by this checkpoint"
                )
        results.append(ex)
    if unexplained and len(unexplained) == len(results):
        return fail(f"no sentence could be explained; {unexplained[0]}")

    problem = write_output(
        "-o", args.output, lambda path: write_jsonl(path, ({"checkpoint": args.path, **ex.to_dict()} for ex in results))
    )
    if problem:
        return fail(problem)
    n_tok = sum(len(ex.tokens) for ex in results)
    n_lex = sum(t.origin == "lexicon" for ex in results for t in ex.tokens)
    print(
        f"wrote {args.output}: {len(results)} sentences, {n_tok} output tokens ({n_lex} from the lexicon, "
        f"</s> included)",
        file=sys.stderr,
    )
    if unknown:
        print(
            f"{PROG}: warning: {unknown} source sentence(s) have words outside the source dictionary, read as "
            f"<unk> (see their warnings)",
            file=sys.stderr,
        )
    if unexplained:
        print(
            f"{PROG}: warning: {len(unexplained)} of {len(results)} sentences could not be explained (the page and "
            f"their JSON lines say why); {unexplained[0]}",
            file=sys.stderr,
        )
    if mismatched:
        print(
            f"{PROG}: warning: {mismatched} hypotheses have token scores (P lines) that differ from this "
            f"checkpoint's: was {args.generate_output} made with {args.path}?",
            file=sys.stderr,
        )
    if args.html:
        title = args.title or f"Why each output word was chosen: {args.path}"
        origin = (
            f"hypotheses of {args.generate_output}"
            if args.generate_output
            else f"{args.source} decoded with beam {args.beam} ({args.beam_search})"
        )
        page = E.render_html(results, title=title, subtitle=f"checkpoint {args.path}; {origin}")

        def write_page(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)

        problem = write_output("--html", args.html, write_page)
        if problem:
            return fail(problem)
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
