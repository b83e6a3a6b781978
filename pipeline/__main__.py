from components.artifact_files import exit_past_native_teardown
from pipeline.cli import main

exit_past_native_teardown(main())
