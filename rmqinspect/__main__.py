"""``python -m rmqinspect``."""

from rmqinspect.cli.app import main

main()
