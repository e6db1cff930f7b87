"""The suite's fixtures (its helpers are the importable modules of tests/helpers)."""

import pytest

import fairseq_lexical  # noqa: F401  (compatibility fixes, e.g. checkpoint loading, for every test module)
from tests.helpers.environment import needs_cuda
from tests.helpers.tiny_runs import TinyRuns
from tests.helpers.toy_data import make_toy_data


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=needs_cuda)], ids=["cpu", "cuda"])
def device(request):
    """The device a model-level check or a numeric test runs on: the CPU always, CUDA where there is one
    (`-k cuda` selects those variants)."""
    return request.param


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """Raw and fairseq-preprocessed toy data: 60 train, 20 valid, 20 test pairs, and a lexicon file."""
    return make_toy_data(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="session")
def tiny_runs(toy_data, tmp_path_factory):
    """The session's tiny runs (TinyRuns): ``tiny_runs("lex_lstm", "beam5")`` or ``tiny_runs(tiny_spec(...))``."""
    return TinyRuns(toy_data, tmp_path_factory.mktemp("tiny_runs"))
