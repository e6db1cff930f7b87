"""`--task lexical_translation --batch-order random`: the training batches of the authors' released code (random
sentences each epoch, sorted by length inside by the collater) instead of fairseq's batches of similar lengths."""

import itertools

import numpy as np
import pytest

from tests.helpers.models import build_model


def train_batches(toy_data, order, epoch=1, seed=1, batch_size=8):
    _, task, _ = build_model(
        toy_data / "bin",
        "--task",
        "lexical_translation",
        "--batch-order",
        order,
        "--arch",
        "lstm_plain_small",
        "--seed",
        str(seed),
    )
    task.load_dataset("train", combine=True)
    task.load_dataset("valid")
    it = task.get_batch_iterator(
        dataset=task.dataset("train"), max_sentences=batch_size, seed=seed, epoch=epoch, max_positions=(1024, 1024)
    )
    valid = task.get_batch_iterator(dataset=task.dataset("valid"), max_sentences=batch_size, seed=seed, epoch=epoch)
    return task, [list(b) for b in it.frozen_batches], [list(b) for b in valid.frozen_batches]


def spread(task, batches):
    """Mean over batches of the range of source lengths inside a batch."""
    sizes = task.dataset("train").src_sizes
    return np.mean([sizes[b].max() - sizes[b].min() for b in batches])


def test_random_batches_cover_every_sentence_once_and_mix_lengths(toy_data):
    task, random_batches, random_valid = train_batches(toy_data, "random")
    _, length_batches, length_valid = train_batches(toy_data, "length")
    n = len(task.dataset("train"))
    for batches in (random_batches, length_batches):
        assert sorted(itertools.chain(*batches)) == list(range(n))
        assert max(map(len, batches)) == 8
    assert spread(task, random_batches) > spread(task, length_batches)  # fairseq's batches hold similar lengths
    assert random_valid == length_valid  # validation batches by length either way


def test_random_batches_are_new_each_epoch_and_the_same_for_the_same_seed_and_epoch(toy_data):
    _, epoch1, _ = train_batches(toy_data, "random", epoch=1)
    _, again, _ = train_batches(toy_data, "random", epoch=1)
    _, epoch2, _ = train_batches(toy_data, "random", epoch=2)
    _, other_seed, _ = train_batches(toy_data, "random", epoch=1, seed=2)
    assert epoch1 == again  # a resumed epoch gets its batches again
    key = lambda batches: sorted(map(sorted, batches))  # noqa: E731  (batch contents, whatever their order)
    assert key(epoch1) != key(epoch2) and key(epoch1) != key(other_seed)


def test_an_unknown_batch_order_is_refused(toy_data):
    with pytest.raises(SystemExit):
        build_model(toy_data / "bin", "--task", "lexical_translation", "--batch-order", "sorted", "--arch", "lstm")
