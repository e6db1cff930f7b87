"""python -m fairseq_lexical_recipes TASK [options] (examples/<task>/run.sh)."""

import sys

from fairseq_lexical_recipes.cli import main

sys.exit(main())
