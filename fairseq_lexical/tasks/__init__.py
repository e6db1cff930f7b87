from . import lexical_translation  # noqa: F401  (registers the tasks)
from . import lla_translation  # noqa: F401
from . import pretrained_tasks  # noqa: F401
