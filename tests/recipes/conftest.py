"""The recipes' tests' fixtures (their helpers: tests/helpers/recipes.py)."""

import pytest

from tests.helpers.recipes import write_tiny_scan


@pytest.fixture
def tiny_scan(tmp_path):
    """brendenlake/SCAN layout: add_prim_split/tasks_{train,test}_addprim_jump.txt, 40 + 10 lines."""
    return write_tiny_scan(tmp_path)
