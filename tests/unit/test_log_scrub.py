"""The server log: no docqa API key (or other token) in any log line, even when an error quotes the question."""

from __future__ import annotations

import logging

from fastapi.testclient import TestClient

from docqa.audit.scrub import MASK, mask_tokens, scrub_log_records
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


def secret_of(key: str) -> str:
    return key.split("_", 2)[2]


class TestServerLog:
    def test_a_failing_query_logs_no_key(self, tmp_path, caplog):
        def fail(prompt: str) -> str:
            raise RuntimeError(f"upstream rejected: {prompt}")

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(rules=[(".", fail)]))
        key = keys["bob"]
        caplog.set_level(logging.DEBUG)
        with TestClient(app, raise_server_exceptions=False) as client:
            body = {"question": f"Why does {key} fail?", "pipeline": "no_retrieval"}
            assert client.post("/v1/query", headers=auth(key), json=body).status_code == 500
            with client.stream("POST", "/v1/query", headers=auth(key), json={**body, "stream": True}) as r:
                assert "internal_error" in r.read().decode()
        assert "upstream rejected" in caplog.text  # the failure was logged, with its traceback
        assert key not in caplog.text
        assert secret_of(key) not in caplog.text

    def test_records_keep_their_arguments_unless_they_hold_a_token(self):
        key = "dq_0123456789abcdef_" + "s3cr3t-Secret_value" * 2
        scrub_log_records()
        scrub_log_records()  # idempotent
        factory = logging.getLogRecordFactory()
        plain = factory("x", logging.INFO, __file__, 1, '%s "%s %s"', ("1.2.3.4", "GET", "/v1/me"), None)
        assert plain.args == ("1.2.3.4", "GET", "/v1/me")
        access = factory("x", logging.INFO, __file__, 1, '%s "%s %s"', ("1.2.3.4", "GET", f"/x?k={key}"), None)
        assert access.args == ("1.2.3.4", "GET", f"/x?k={MASK}")
        error = factory("x", logging.WARNING, __file__, 1, "failed: %s", (ValueError(key),), None)
        assert error.getMessage() == f"failed: {MASK}"
        assert mask_tokens(key) == MASK
