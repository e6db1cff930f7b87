from . import lla_translation  # noqa: F401  (registers the task)
