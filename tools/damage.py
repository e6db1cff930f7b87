#!/usr/bin/env python
"""`python tools/damage.py` = `fairseq-lexical-damage`: the installed entry point
(see fairseq_lexical/cli/damage.py)."""

import sys

from fairseq_lexical.cli.damage import main

if __name__ == "__main__":
    sys.exit(main())
