#!/usr/bin/env python
"""`python tools/score.py` = `fairseq-lexical-score` (the installed entry point; see lexical_offline/cli/score.py)."""

import sys

from lexical_offline.cli.score import main

if __name__ == "__main__":
    sys.exit(main())
