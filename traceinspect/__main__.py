"""python -m traceinspect"""

from .cli import main

main()
