"""An unexpected failure is logged as one line that finds the bug without quoting the value behind it."""

import json
import logging

from liverl.redaction.error_log import log_unexpected


def _fail_on(value: str) -> None:
    raise ValueError(f"cannot parse {value}")


def test_the_line_names_the_error_and_where_it_was_raised_with_its_message_redacted(caplog):
    log = logging.getLogger("liverl.test.error_log")
    try:
        _fail_on("card 4111 1111 1111 1111 of bob@example.com")
    except ValueError as error:
        with caplog.at_level(logging.ERROR, logger=log.name):
            log_unexpected(log, "parsing failed", error)
    [record] = caplog.records
    line = json.loads(record.getMessage())
    assert line["msg"] == "parsing failed" and line["error_type"] == "ValueError"
    assert "4111" not in caplog.text and "bob@example.com" not in caplog.text
    assert line["detail"].startswith("cannot parse ") and "[REDACTED:" in line["detail"]
    assert any(frame.endswith(" _fail_on") for frame in line["where"])
    assert record.exc_info is None  # no traceback: its last line would quote the value


def test_a_stage_passes_its_own_redaction(caplog):
    log = logging.getLogger("liverl.test.error_log")
    with caplog.at_level(logging.ERROR, logger=log.name):
        log_unexpected(log, "failed", KeyError("secret-id"), redact=lambda text: text.replace("secret-id", "[X]"))
    assert "secret-id" not in caplog.text and "[X]" in json.loads(caplog.records[0].getMessage())["detail"]
