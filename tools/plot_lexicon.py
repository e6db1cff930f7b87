#!/usr/bin/env python
"""`python tools/plot_lexicon.py` = `fairseq-lexical-plot-lexicon`: the installed entry point
(see lexical_offline/cli/plot_lexicon.py)."""

import sys

from lexical_offline.cli.plot_lexicon import main

if __name__ == "__main__":
    sys.exit(main())
