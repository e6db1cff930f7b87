"""Hand-made explanations (``fairseq_lexical.analysis.explain``'s dataclasses) for the tests of the explain page and
of tools/explain.py: two sentences, one right and one wrong, with lexicon and written tokens."""

import math


def token_explanation(position, token, origin, source_position=None, source_word=None, weight=None):
    from fairseq_lexical.analysis.explain import LexiconEntry, TokenExplanation

    lexicon, write = (0.8, 0.1) if origin == "lexicon" else (0.05, 0.85)
    return TokenExplanation(
        position=position,
        token=token,
        p=lexicon + write,
        log_p=math.log(lexicon + write),
        p_gate=0.2,
        write=write,
        lexicon=lexicon,
        origin=origin,
        lexicon_share=lexicon / (lexicon + write),
        renormalization=1.0,
        source_position=source_position,
        source_word=source_word,
        attention=None if weight is None else 0.9,
        lexical_mass=None if weight is None else 0.9 * weight,
        entry=None if weight is None else LexiconEntry(source_word, token, weight),
    )


def hand_made_sentences():
    from fairseq_lexical.analysis.explain import SentenceExplanation

    right = SentenceExplanation(
        source_tokens=["dax", "fep", "</s>"],
        output_tokens=["RED", "RED", "RED", "</s>"],
        tokens=[
            token_explanation(0, "RED", "lexicon", 0, "dax", 1.0),
            token_explanation(1, "RED", "written"),
            token_explanation(2, "RED", "written"),
            token_explanation(3, "</s>", "written"),
        ],
        sample_id=0,
        reference="RED RED RED",
        correct=True,
    )
    wrong = SentenceExplanation(
        source_tokens=["lug", "<x&y>", "</s>"],
        output_tokens=["BLUE", "<x&y>", "</s>"],
        tokens=[
            token_explanation(0, "BLUE", "lexicon", 0, "lug", 0.75),
            token_explanation(1, "<x&y>", "written"),
            token_explanation(2, "</s>", "written"),
        ],
        sample_id=1,
        reference="BLUE GREEN",
        correct=False,
    )
    return [right, wrong]
