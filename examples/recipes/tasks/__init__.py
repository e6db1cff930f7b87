"""The recipes' dataset tasks, by name (the TASK of `python -m recipes TASK`)."""

from recipes.tasks.base import Prepared, Task, find_file  # noqa: F401
from recipes.tasks.cogs import Cogs
from recipes.tasks.colors import Colors
from recipes.tasks.eng_cmn import EngCmn
from recipes.tasks.scan import Scan

# name -> Task class: each invocation builds its own, with its options (Task.own_options)
TASKS = {t.name: t for t in (Colors, Scan, Cogs, EngCmn)}
