#!/usr/bin/env python
"""`python tools/select_compositional.py` = `fairseq-lexical-select-compositional`: the installed entry point
(see lexical_offline/cli/select_compositional.py)."""

import sys

from lexical_offline.cli.select_compositional import main

if __name__ == "__main__":
    sys.exit(main())
