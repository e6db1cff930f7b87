#!/usr/bin/env python
"""`python tools/explain.py` = `fairseq-lexical-explain`: the installed entry point
(see fairseq_lexical/cli/explain.py)."""

import sys

from fairseq_lexical.cli.explain import main

if __name__ == "__main__":
    sys.exit(main())
