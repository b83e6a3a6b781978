"""`python -m pipeline ...`: the same command line as the installed `accel-tfx` (pipeline/commands/cli.py)."""
from pipeline.commands.cli import command_line

command_line()
