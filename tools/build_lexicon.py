#!/usr/bin/env python
"""`python tools/build_lexicon.py` = `fairseq-lexical-build-lexicon`: the installed entry point
(see lexical_offline/cli/build_lexicon.py)."""

import sys

from lexical_offline.cli.build_lexicon import main

if __name__ == "__main__":
    sys.exit(main())
