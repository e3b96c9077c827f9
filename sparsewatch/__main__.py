"""``python -m sparsewatch``."""

from sparsewatch.cli import main

main()
