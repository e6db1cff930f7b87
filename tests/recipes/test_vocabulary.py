"""fairseq_lexical_recipes/vocabulary.py: the warnings about test tokens that never occur in training."""


def test_a_test_set_of_unseen_tokens_is_reported_and_nfd_is_named():
    """Issue 55, defect 15: training in NFC and testing in NFD turned 64% of the test tokens into <unk>, shown only
    in preprocess.log."""
    import unicodedata

    from fairseq_lexical_recipes.vocabulary import out_of_vocabulary_notes

    words = ["café", "élan", "naïve", "déjà", "vu"]
    train = [(w, w.upper()) for w in words]
    assert out_of_vocabulary_notes(train, train) == []
    nfd = [(unicodedata.normalize("NFD", s), t) for s, t in train]
    (note,) = out_of_vocabulary_notes(train, nfd)
    assert note.startswith("warning: 80% of the test source tokens never occur in training")
    assert "differ in normalisation" in note
    (note,) = out_of_vocabulary_notes(train, [("zzz", "CAFÉ")])
    assert "100% of the test source" in note and "normalisation" not in note
