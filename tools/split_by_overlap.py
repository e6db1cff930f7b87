#!/usr/bin/env python
"""`python tools/split_by_overlap.py` = `fairseq-lexical-split-by-overlap`: the installed entry point
(see lexical_offline/cli/split_by_overlap.py)."""

import sys

from lexical_offline.cli.split_by_overlap import main

if __name__ == "__main__":
    sys.exit(main())
