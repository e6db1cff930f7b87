"""The recipes' dataset tasks, by name (the TASK of `python -m fairseq_lexical_recipes TASK`). tasks/cat_oci is
examples/cat_oci's recipe, with its own options and one stage per training size: not a TASK of that command line."""

from fairseq_lexical_recipes.tasks.base import Prepared, Task, find_file  # noqa: F401
from fairseq_lexical_recipes.tasks.cogs import Cogs
from fairseq_lexical_recipes.tasks.colors import Colors
from fairseq_lexical_recipes.tasks.eng_cmn import EngCmn
from fairseq_lexical_recipes.tasks.scan import Scan

# name -> Task class: each invocation builds its own, with its options (Task.own_options)
TASKS = {t.name: t for t in (Colors, Scan, Cogs, EngCmn)}
