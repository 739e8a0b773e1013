"""The HTTP service: FastAPI app, Redis adapters, settings and metrics."""
