"""Build hook for the optional native scanner; all metadata lives in pyproject.toml.

traceinspect/trace/_scan.c is a columnar reader for the events array (see the file's header). It is
optional: where no C compiler is available the build goes on without it and traceinspect uses its
pure-Python decoder, which gives the same tables, only slower.
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceinspect.trace._scan",
            ["traceinspect/trace/_scan.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
