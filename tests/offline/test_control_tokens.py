"""Control tokens are the symbols a model's task adds to its dictionaries (language tokens, mBART's <mask>), not
whatever looks like one (lexical_offline/lexicon/symbols.py; fairseq_lexical.models.pretrained.task_control_tokens):
a corpus's __url__, __num__, __eq__, __ent_Type__ or [foo_bar] keeps its lexicon entries, copies to itself and can
be a --lexicon-override term, under a plain task and under a multilingual one, whose own language tokens are still
never copied and refused as terms."""

import argparse

import pytest
import torch

from tests.helpers.toy_data import binarise, make_toy_pairs, write_split
from tests.helpers.models import build_model

PLACEHOLDERS = ["__url__", "__num__", "__eq__", "__ent_Type__", "[foo_bar]"]
LANGUAGES = ("en", "xx")
MULTILINGUAL = ("--task", "lexical_translation_multi_simple_epoch", "--lang-pairs", "en-xx", "--encoder-langtok")
MULTILINGUAL += ("src", "--decoder-langtok", "--source-lang", "en", "--target-lang", "xx")


@pytest.fixture(scope="module")
def placeholder_data(tmp_path_factory):
    """ROOT: the toy corpus with a placeholder copied from source to target in each pair (files ROOT/SPLIT.en and
    .xx), binarised with one joined dictionary into ROOT/bin, and a lexicon with entries on the placeholders."""
    root = tmp_path_factory.mktemp("placeholders")
    for split, (n, seed) in {"train": (60, 1), "valid": (20, 2), "test": (20, 3)}.items():
        pairs = [(f"{s} {p}", f"{t} {p}") for i, (s, t) in enumerate(make_toy_pairs(n, seed))
                 for p in [PLACEHOLDERS[i % len(PLACEHOLDERS)]]]  # fmt: skip
        write_split(str(root / split), pairs)
        for side, language in zip(("src", "tgt"), LANGUAGES):
            (root / f"{split}.{side}").rename(root / f"{split}.{language}")
    binarise(root, root / "bin", "--joined-dictionary", languages=LANGUAGES)
    (root / "lexicon.tsv").write_text("".join(f"{p}\t{p}\t1\n" for p in PLACEHOLDERS) + "a1\tB1\t1\n")
    return root


def model_of(root, *task_options, lexicon="identity"):
    """(lex_transformer_tiny with ``lexicon``, its task), built in-process as fairseq-train builds them."""
    model, task, _ = build_model(root / "bin", *task_options, "--arch", "lex_transformer_tiny", "--lexicon", lexicon)
    return model, task


def rows(head, dictionary, words):
    """Each word's lexicon row as {target word: weight} over the weights > 0."""
    dense = head.lexicon_dense_rows(torch.tensor([[dictionary.index(w) for w in words]]))[0]
    return {w: {dictionary[int(t)]: float(row[t]) for t in row.nonzero()[:, 0]} for w, row in zip(words, dense)}


@pytest.mark.parametrize("multilingual", [False, True], ids=["translation", "multi_simple_epoch"])
def test_placeholders_are_copied_and_only_the_tasks_language_tokens_are_not(placeholder_data, multilingual):
    task_options = MULTILINGUAL if multilingual else ("--source-lang", "en", "--target-lang", "xx")
    model, task = model_of(placeholder_data, *task_options)
    head, source, target = model.decoder.lexical_head, task.source_dictionary, task.target_dictionary
    assert all(source.index(p) != source.unk() for p in PLACEHOLDERS)  # the data holds them
    language_tokens = ["__en__", "__xx__"] if multilingual else []
    copied = rows(head, source, PLACEHOLDERS + language_tokens)
    for p in PLACEHOLDERS:
        assert copied[p] == {p: 1.0}, p
    for token in language_tokens:
        assert copied[token] == {target.unk_word: 1.0}, token  # the <unk> sink: never copied
    # a lexicon file's entries on them are used, not counted as language tokens
    learned, _ = model_of(placeholder_data, *task_options, lexicon=placeholder_data / "lexicon.tsv")
    expected = {"__ent_Type__": {"__ent_Type__": 1.0}, "a1": {"B1": 1.0}}
    assert rows(learned.decoder.lexical_head, source, ["__ent_Type__", "a1"]) == expected
    # the control tokens: those the task added to the dictionaries as it loaded them, and no others
    assert head.control_tokens == set(language_tokens)
    assert source.symbols[len(source) - len(language_tokens) :] == language_tokens


@pytest.mark.parametrize("multilingual", [False, True], ids=["translation", "multi_simple_epoch"])
def test_placeholders_are_terms_and_language_tokens_are_refused(placeholder_data, tmp_path, multilingual):
    from fairseq_lexical.modules.lexicon_override import LexiconOverrideError, apply_override

    task_options = MULTILINGUAL if multilingual else ("--source-lang", "en", "--target-lang", "xx")
    model, task = model_of(placeholder_data, *task_options)
    head, source, target = model.decoder.lexical_head, task.source_dictionary, task.target_dictionary
    terms = tmp_path / "terms.tsv"
    terms.write_text("__url__\t__num__\t1\n[foo_bar]\t__eq__\t1\n")
    report = apply_override([model], str(terms), source, target)
    assert report["sources"] == 2 and not report["skipped"]
    assert rows(head, source, ["__url__"]) == {"__url__": {"__num__": pytest.approx(1.0)}}
    apply_override([model], None, source, target)
    terms.write_text("__url__\t__xx__\t1\n")
    if multilingual:
        with pytest.raises(LexiconOverrideError, match=f"{terms}:1: target '__xx__' is a language token, not a word"):
            apply_override([model], str(terms), source, target)
    else:  # no such token here: an unknown target, skipped
        with pytest.raises(LexiconOverrideError, match="1 target not in the target dictionary"):
            apply_override([model], str(terms), source, target)


@pytest.mark.parametrize(
    "options, added",
    [
        (dict(task="lexical_translation_from_pretrained_bart", langs="en_XX,ro_RO"), ["[en_XX]", "[ro_RO]", "<mask>"]),
        (dict(task="translation_from_pretrained_bart", langs="ar_AR,en_XX"), ["[ar_AR]", "[en_XX]", "<mask>"]),
        (dict(task="translation_multi_simple_epoch", lang_pairs="eng_Latn-oci_Latn", langs=["oci_Latn", "eng_Latn"]),
         ["__oci_Latn__", "__eng_Latn__"]),
        (dict(task="lexical_translation_multi_simple_epoch", lang_pairs=["xx-en"]), ["__en__", "__xx__"]),
        (dict(task="translation_multi_simple_epoch", lang_pairs="en-ro", lang_tok_style="mbart"),
         ["[en]", "[ro]", "<mask>"]),
        # mBART's and BART's pretraining tasks (the pretrained checkpoint's dictionary: check_dictionary_symbols)
        (dict(task="multilingual_denoising", langs="ar_AR,en_XX", add_lang_token=True),
         ["[ar_AR]", "[en_XX]", "<mask>"]),
        (dict(task="multilingual_denoising", langs="ar_AR,en_XX", add_lang_token=False), ["<mask>"]),
        (dict(task="denoising"), ["<mask>"]),
        (dict(task="translation"), []),
        (dict(task="lexical_translation", langs="en_XX"), []),
    ],
)  # fmt: skip
def test_control_tokens_are_what_the_task_adds(options, added):
    """In the task's order (the language order decides the token ids); a task that adds none has none."""
    import fairseq_lexical
    from fairseq_lexical.models.pretrained import task_control_tokens

    fairseq_lexical.register()
    assert task_control_tokens(argparse.Namespace(**options)) == added
    assert task_control_tokens({"_name": options["task"], **options}) == added  # a checkpoint's task options
