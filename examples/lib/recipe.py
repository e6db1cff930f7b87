#!/usr/bin/env python
"""Kept so that older commands (`python examples/lib/recipe.py TASK ...`, examples/RESULTS.md) still run: the recipes
are the package examples/recipes, run as examples/<task>/run.sh runs it (`python -m recipes TASK ...`)."""

import os
import sys

if __name__ == "__main__":
    examples = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (examples, os.path.dirname(examples), os.environ.get("PYTHONPATH")) if p)
    os.execve(sys.executable, [sys.executable, "-m", "recipes", *sys.argv[1:]], dict(os.environ, PYTHONPATH=path))
