#!/usr/bin/env python
"""`python tools/plot_gates.py` = `fairseq-lexical-plot-gates`: the installed entry point
(see fairseq_lexical/cli/plot_gates.py)."""

import sys

from fairseq_lexical.cli.plot_gates import main

if __name__ == "__main__":
    sys.exit(main())
