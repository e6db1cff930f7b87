#!/usr/bin/env python
"""`python tools/aggregate_results.py` = `fairseq-lexical-aggregate-results`: the installed entry point
(see lexical_offline/cli/aggregate_results.py)."""

import sys

from lexical_offline.cli.aggregate_results import main

if __name__ == "__main__":
    sys.exit(main())
