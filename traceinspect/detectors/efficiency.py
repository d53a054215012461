"""Moved to traceinspect.facts.efficiency (the derived-facts layer); this alias keeps old imports working."""
from ..facts.efficiency import *  # noqa: F401,F403
