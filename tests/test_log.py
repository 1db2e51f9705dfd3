"""art's loggers stay quiet until the application configures logging."""

import subprocess
import sys

SCRIPT = """
from art.core.log import get_logger
log = get_logger("art.probe")
log.debug("quiet debug")
log.info("quiet info")
log.warning("loud warning", api_key="sk-live-1234567890abcdef")
"""


def test_unconfigured_art_logs_only_warnings_to_stderr_with_secrets_masked():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout == ""
    assert "quiet" not in out.stderr
    assert "loud warning" in out.stderr
    assert "sk-live-1234567890abcdef" not in out.stderr
