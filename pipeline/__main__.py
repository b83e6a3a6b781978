import sys

from pipeline.cli import main
from pipeline.kfp_entrypoint import INTERRUPTED_EXIT_CODE

try:
    code = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    code = INTERRUPTED_EXIT_CODE
except SystemExit as done:
    code = done.code
# Imported only now: it imports TensorFlow, whose start-up lines main() silences in quiet mode.
from components.artifact_files import exit_past_native_teardown  # noqa: E402

exit_past_native_teardown(code)
