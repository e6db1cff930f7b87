#!/usr/bin/env python
"""`python tools/unk_markers.py` = `fairseq-lexical-unk-markers`: the installed entry point
(see lexical_offline/cli/unk_markers.py)."""

import sys

from lexical_offline.cli.unk_markers import main

if __name__ == "__main__":
    sys.exit(main())
