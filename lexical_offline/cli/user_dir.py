"""Print the directory to give fairseq's ``--user-dir``: the installed ``fairseq_lexical`` package.

    fairseq-train data-bin --user-dir "$(fairseq-lexical-user-dir)" --arch lex_lstm ...

fairseq 0.12 finds plugins only through ``--user-dir``, and a checkpoint of a plugin model loads only once the plugin
is imported, so fairseq-generate and fairseq-interactive need the option too. The package is located, not imported
(no fairseq start-up).
"""

import argparse
import importlib.util
import sys


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    spec = importlib.util.find_spec("fairseq_lexical")
    if spec is None or not spec.submodule_search_locations:
        print("error: fairseq_lexical is not installed for " + sys.executable, file=sys.stderr)
        return 1
    print(list(spec.submodule_search_locations)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
