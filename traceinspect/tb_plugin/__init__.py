"""The TensorBoard plugin: a "traceinspect" tab over the traces torch.profiler wrote into a logdir.

Registered through the `tensorboard_plugins` entry point (extra `traceinspect[tensorboard]`); see
docs/tensorboard.md. Importing this package imports tensorboard.
"""

from __future__ import annotations

from .plugin import TraceinspectPlugin

__all__ = ["TraceinspectPlugin"]
