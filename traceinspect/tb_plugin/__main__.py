"""`python -m traceinspect.tb_plugin --logdir DIR [tensorboard flags]`: TensorBoard with this plugin loaded
explicitly, for a checkout where the package (and so its entry point) is not installed. Installed with the
`tensorboard` extra, plain `tensorboard --logdir DIR` finds the plugin by itself."""

from __future__ import annotations

import sys

from tensorboard import default, program

from .plugin import TraceinspectPlugin


def main(argv: list[str]) -> None:
    plugins = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) != TraceinspectPlugin.plugin_name]
    tb = program.TensorBoard(plugins=plugins + [TraceinspectPlugin])
    tb.configure(argv=[sys.argv[0], *argv])
    tb.main()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
