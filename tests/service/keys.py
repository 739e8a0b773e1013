"""API keys the service tests configure: one of every scope, and one per scope."""

from __future__ import annotations

import json

from pydantic import SecretStr

ADMIN_KEY = "admin-key-for-the-tests-000000"
PREDICT_KEY = "predict-key-for-the-tests-0000"
LEARN_KEY = "learn-key-for-the-tests-000000"
KEYS = {ADMIN_KEY: ["predict", "learn", "admin"], PREDICT_KEY: ["predict"], LEARN_KEY: ["learn"]}
#: Settings fields that turn these keys on.
AUTH = {"api_keys": SecretStr(json.dumps(KEYS))}
#: What the tests' clients send unless a test says otherwise.
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
