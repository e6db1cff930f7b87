#!/usr/bin/env python
"""Kept so that older commands (`python examples/lib/recipe.py TASK ...`, examples/RESULTS.md) still run: the recipes
are the installed package fairseq_lexical_recipes, run as examples/<task>/run.sh runs it
(`python -m fairseq_lexical_recipes TASK ...`)."""

import sys

from fairseq_lexical_recipes.cli import main

if __name__ == "__main__":
    sys.exit(main())
