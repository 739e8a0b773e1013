"""The framework's ceiling for ``/predict``: a bare FastAPI app that parses the same request
body into the same pydantic model and answers a constant of the same response model.

Run it as ``python -m loadtests.common.bare_app``: it is served exactly as ``online-ctr api`` serves
the real app (the same ``uvicorn.run`` keywords, host and port from ``OCTR_HOST``/``OCTR_PORT``;
one worker process, uvicorn's default loop and HTTP implementation, access log off), so the
ratio of the two throughputs is what our own work costs. ``POST /noop`` answers without
reading the body at all: the load generator's reference, to show it is not the bottleneck.
"""

from __future__ import annotations

from fastapi import FastAPI

from service.api.predict_schemas import PredictRequest, PredictResponse
from service.app import NO_TELEMETRY

CONSTANT = PredictResponse(probability=0.5, logit=0.0, model="default", calibrated=False)


def create_bare_app() -> FastAPI:
    """Two routes: ``/predict`` (parse, validate, constant) and ``/noop`` (constant)."""
    app = FastAPI(title="online-ctr bare ceiling", telemetry=NO_TELEMETRY)  # as ours

    @app.post("/predict")
    async def predict(body: PredictRequest) -> PredictResponse:
        return CONSTANT

    @app.post("/noop")
    async def noop() -> dict[str, bool]:
        return {"ok": True}

    return app


def main() -> None:
    """Serve the bare app with the same uvicorn settings as ``online-ctr api``."""
    serve(create_bare_app())


def serve(app: FastAPI) -> None:
    """Serve ``app`` with the same uvicorn settings as ``online-ctr api``."""
    import uvicorn
    from prometheus_client import CollectorRegistry

    from online_ctr.config.settings import get_settings
    from online_ctr.metrics import Metrics
    from online_ctr.process import tune_collector
    from service.connections import RequestsInProgress, bounded_protocol

    settings = get_settings()
    # The API's connection bounds too, counted where nobody reads them: the ratio is then
    # what our routes cost, not what bounding a connection costs (~2.5 us a request).
    app.state.metrics = Metrics(CollectorRegistry())
    app.state.requests = RequestsInProgress()  # told, as the API's is, and never asked
    tune_collector()  # as `online-ctr api` does
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level=settings.log_level,
        # httptools, as uvicorn's "auto" picks, with the connection bounds it lacks.
        http=bounded_protocol(settings, app.state.metrics, app.state.requests),
    )


if __name__ == "__main__":
    main()
