"""Native (C++) libraries such as TFLite's converter and XLA write notices straight to file descriptor 2
("Ignored output_format", "XLA service ... initialized"), past Python's logging and TF_CPP_MIN_LOG_LEVEL.
`native_stderr_to_log` captures them around one call so quiet runs stay quiet."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from absl import logging


@contextlib.contextmanager
def native_stderr_to_log(label: str):
    """Within the block, what native code writes straight to file descriptor 2 goes to the INFO log (shown
    with --verbose) instead of the terminal, and on an exception into the exception's notes."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except Exception as error:
            captured.seek(0)
            error.add_note(captured.read().decode(errors="replace")[-5000:])
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace").strip()
            if text:
                logging.info("%s: %s", label, text)
