from pipeline.cli import main

code = main()
# Imported only now: it imports TensorFlow, whose start-up lines main() silences in quiet mode.
from components.artifact_files import exit_past_native_teardown  # noqa: E402

exit_past_native_teardown(code)
