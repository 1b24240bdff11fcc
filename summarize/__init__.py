"""The command line, above everything else: `summarize` and its commands.

Errors cross into the CLI here (`cli.py`) and nowhere else.
"""
