"""Moved to traceinspect.facts.memory_fit (the derived-facts layer); this alias keeps old imports working."""
from ..facts.memory_fit import *  # noqa: F401,F403
