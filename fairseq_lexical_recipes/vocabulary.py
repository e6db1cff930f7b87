"""Warnings about test tokens that training never saw (they become <unk>), printed before fairseq-preprocess."""

from __future__ import annotations

from typing import Dict, List


def out_of_vocabulary_notes(train, test, threshold: float = 0.05) -> List[str]:
    """Warnings, one per side of the pairs at most, about test tokens that never occur in training: they become
    <unk>, which fairseq reports only in preprocess.log. The recipes print them before preprocessing, and under
    --dry-run too. A side gets one when

    - any test token at all is unseen only because the files differ in Unicode normalisation: unseen as written, seen
      once both are in NFC (training in NFC, testing in NFD: the same words, other code points). However few, they
      are words the model knows and will read as <unk>; normalise both files alike (e.g. to NFC);
    - or more than ``threshold`` (5 %) of its test tokens are unseen even in NFC. The paper's test sets stay below it
      (COGS gen: 1.7 % of the target tokens; English-Chinese: 1.9 % source, 4.4 % target); a test set tokenised or
      cased otherwise than the training set goes above it."""
    import unicodedata

    def share(count: int, total: int) -> str:  # one token in 10,000 is 0.01%, not 0%
        p = 100 * count / total
        return f"{p:.0f}%" if p >= 1 else f"{p:.2g}%"

    notes = []
    for side, name in ((0, "source"), (1, "target")):
        vocab = {w for pair in train for w in pair[side].split()}
        tokens = [w for pair in test for w in pair[side].split()]
        unseen = [w for w in tokens if w not in vocab]
        if not unseen:
            continue
        in_nfc: Dict[str, str] = {}  # NFC form -> a training token of that form
        for w in vocab:
            in_nfc.setdefault(unicodedata.normalize("NFC", w), w)
        renormalised = [w for w in unseen if unicodedata.normalize("NFC", w) in in_nfc]
        if not renormalised and (len(unseen) / len(tokens)) <= threshold:
            continue
        note = (
            f"warning: {share(len(unseen), len(tokens))} of the test {name} tokens never occur in training "
            f"({len(unseen)} of {len(tokens)}; they become <unk>)"
        )
        if renormalised:
            w = renormalised[0]
            note += (
                f"; {share(len(renormalised), len(tokens))} only because the files differ in normalisation: they "
                f"occur once both are in Unicode NFC (e.g. {ascii(w)} in the test file, "
                f"{ascii(in_nfc[unicodedata.normalize('NFC', w)])} in training; NFC against NFD?), normalise them "
                "alike (e.g. to NFC)"
            )
        notes.append(note)
    return notes


def overlap_notes(train, valid, test) -> List[str]:
    """Warnings about evaluation pairs that are also training pairs (source and target as written): a test score
    over them measures recall of the training data, a validation loss over them early-stops on it. One note per
    split that has any, with the count; a split held out from the training file (valid is None) has none."""
    seen = set(map(tuple, train))
    notes = []
    for name, pairs in (("validation", valid), ("test", test)):
        if not pairs:
            continue
        repeated = [p for p in pairs if tuple(p) in seen]
        if repeated:
            source, target = repeated[0]
            notes.append(
                f"warning: {len(repeated)} of the {len(pairs)} {name} pairs also occur in the training pairs (e.g. "
                f"{source!r} -> {target!r}): the {name} score over them measures recall of the training data"
            )
    return notes


def data_warnings(prep) -> List[str]:
    """Every warning about a task's prepared data (fairseq_lexical_recipes.tasks.Prepared), printed before
    fairseq-preprocess and
    under --dry-run: evaluation pairs repeated from training, test tokens training never saw."""
    return overlap_notes(prep.train, prep.valid, prep.test) + out_of_vocabulary_notes(prep.train, prep.test)
