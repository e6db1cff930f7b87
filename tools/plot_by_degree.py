#!/usr/bin/env python
"""`python tools/plot_by_degree.py` = `fairseq-lexical-plot-by-degree`: the installed entry point
(see lexical_offline/cli/plot_by_degree.py)."""

import sys

from lexical_offline.cli.plot_by_degree import main

if __name__ == "__main__":
    sys.exit(main())
