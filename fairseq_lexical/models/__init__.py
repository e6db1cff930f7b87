from . import lex_lstm  # noqa: F401  (registers the model and its architectures)
from . import lex_transformer  # noqa: F401
from . import lla_lstm  # noqa: F401
from . import rdangle  # noqa: F401
