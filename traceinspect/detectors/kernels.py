"""Moved to traceinspect.facts.kernels (the derived-facts layer); this alias keeps old imports working."""
from ..facts.kernels import *  # noqa: F401,F403
from ..facts.kernels import _first_float_template  # noqa: F401
