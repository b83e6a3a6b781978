import sys

from components.process_exit import exit_past_native_teardown
from pipeline.commands.cli import main
from pipeline.dag.kfp_entrypoint import INTERRUPTED_EXIT_CODE

try:
    code = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    code = INTERRUPTED_EXIT_CODE
except SystemExit as done:
    code = done.code
exit_past_native_teardown(code)
