"""What the OpenAPI document adds when API keys are on: the two ways to send a key, which
scope each operation needs, and its 401 and 403 answers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.api.auth import Authenticator

SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <key>"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
}
_ERROR = {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
}


def _secure(operation: dict[str, Any], scope: str, path: str) -> None:
    operation["security"] = [{"bearer": []}, {"apiKey": []}]
    needs = f"the `{scope}` scope" if scope else "any API key"
    on = " on the model or group it names" if scope in ("predict", "learn", "admin") else ""
    on = " on every model" if path.startswith("/keys") else on
    operation["description"] = f"{operation.get('description', '')}\n\nNeeds {needs}{on}.".strip()
    responses = operation.setdefault("responses", {})
    responses["401"] = {"description": "No API key, or an unknown one.", **_ERROR}
    responses["403"] = {"description": f"The API key lacks {needs}{on}.", **_ERROR}


def document_auth(app: FastAPI, auth: Authenticator) -> None:
    """Make ``app.openapi()`` describe the API keys each operation needs."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()  # FastAPI caches it in app.openapi_schema
            document.setdefault("components", {})["securitySchemes"] = SCHEMES
            for path, operations in document["paths"].items():
                scope = auth.required(path)
                if scope is not None:
                    for operation in operations.values():
                        _secure(operation, scope, path)
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]
