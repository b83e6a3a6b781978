"""Native writes to file descriptor 2 are captured into the log, and into an exception's notes on failure."""
import logging
import os

import pytest

from components.native_stderr import native_stderr_to_log


def test_native_output_goes_to_the_log_not_the_terminal(capfd, caplog):
    # The absl logger's own level too: an earlier test may have lowered absl's verbosity.
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="absl"), native_stderr_to_log("converter"):
        os.write(2, b"Ignored output_format.\n")
    assert "Ignored output_format" not in capfd.readouterr().err
    assert any("converter: Ignored output_format." in record.getMessage() for record in caplog.records)
    os.write(2, b"after\n")  # file descriptor 2 is the terminal again
    assert "after" in capfd.readouterr().err


def test_a_failure_carries_the_native_output(capfd):
    with pytest.raises(RuntimeError) as raised, native_stderr_to_log("converter"):
        os.write(2, b"op is neither a custom op nor a flex op\n")
        raise RuntimeError("conversion failed")
    assert "neither a custom op nor a flex op" in "".join(raised.value.__notes__)
