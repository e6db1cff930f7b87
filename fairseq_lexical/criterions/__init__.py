from . import lexical_cross_entropy  # noqa: F401  (registers the criterion)
