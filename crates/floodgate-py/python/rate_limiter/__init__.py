"""A compatibility alias: the floodgate classes under the name ``rate_limiter``, so that
code written as ``from rate_limiter import FixedWindow`` runs unchanged. Everything here *is* floodgate's
(the same class objects); see ``help(floodgate)``.
"""

from floodgate import *  # noqa: F401,F403
from floodgate import __all__, __version__  # noqa: F401
