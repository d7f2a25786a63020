"""Server-test fixtures: an API client whose every response is checked against the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.server.schema_check import check_response
from tests.server.srv_helpers import OCTET


class Api:
    """Flask test client + bearer tokens; asserts each response matches the OpenAPI document."""

    def __init__(self, client: FlaskClient, app_token: str, admin_token: str) -> None:
        self.client, self.app_token, self.admin_token = client, app_token, admin_token

    def request(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> TestResponse:
        headers = dict(kwargs.pop("headers", {}) or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        response = self.client.open(path, method=method, headers=headers, **kwargs)
        check_response(method, path, response.status_code, response.content_type, response.get_data())
        return response

    def admin(self, method: str, path: str, **kwargs: Any) -> TestResponse:
        return self.request(method, path, token=self.admin_token, **kwargs)

    def app(self, method: str, path: str, **kwargs: Any) -> TestResponse:
        return self.request(method, path, token=self.app_token, **kwargs)

    def create(self, spec: Any, **extra: Any) -> TestResponse:
        body = {k: v for k, v in spec.to_dict().items() if k not in ("version", "effective_epsilon")}
        return self.admin("POST", "/v1/metrics", json={**body, **extra})

    def post_batch(self, data: bytes, *, content_type: str = OCTET, token: str | None = "app") -> TestResponse:
        tok = self.app_token if token == "app" else token
        return self.request("POST", "/v1/reports", token=tok, data=data, content_type=content_type)


@pytest.fixture
def api(client: FlaskClient, app_token: str, admin_token: str) -> Api:
    return Api(client, app_token, admin_token)
