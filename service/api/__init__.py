"""The HTTP API: request/response schemas, dependencies, error mapping and one router per resource.

The application itself is assembled by :func:`service.app.create_app`.
"""
