from . import adam_foreach  # noqa: F401  (registers the optimizer)
