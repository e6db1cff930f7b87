"""Fixtures of the offline tests."""

import pytest


@pytest.fixture()
def small_corpus():
    # counts: the 7, cat 4, sat 4, on 4, mat 3, dog 2, ran 1; "on the" and "the mat" 3 (no entries)
    train = [
        "the cat sat on the mat",
        "the cat sat on the mat",
        "the cat sat on",
        "the cat sat on the mat",
        "dog ran dog",
    ]
    candidates = [
        "the cat sat on the mat",  # 0: every word >= 3; "mat" (3) is no dictionary entry (needs > 3)
        "the dog sat",  # 1: dog seen twice -> rare
        "the zebra sat",  # 2: zebra never seen -> unseen
        "",  # 3: empty
        "the cat sat on the mat",  # 4: duplicate of 0
        "on the cat",  # 5
        "ran zebra",  # 6: unseen (zebra) takes precedence over rare (ran)
        "sat on",  # 7
    ]
    return train, candidates
