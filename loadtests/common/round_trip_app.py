"""The bare app's ``/predict`` plus the cheapest Redis round trip there is: what any
``/predict`` that asks Redis once per request (as ours does, to be exact as of now) cannot go
below, on the same machine and client.

Run it as ``python -m loadtests.common.round_trip_app`` with ``ROUND_TRIP_REDIS_URL`` set
(``redis://[:password@]host:port``): served as :mod:`loadtests.common.bare_app` is, its
``POST /predict`` parses the same body into the same model, sends ``PING`` on one connection
it opened at its first request (a raw asyncio stream: no client library, no script) and
answers the bare app's constant once the ``+PONG`` is read.
"""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlparse

from fastapi import FastAPI

from loadtests.common.bare_app import CONSTANT, serve
from service.api.predict_schemas import PredictRequest, PredictResponse
from service.app import NO_TELEMETRY

PING = b"*1\r\n$4\r\nPING\r\n"


class RoundTrip:
    """One connection to Redis, opened at the first request, and its ``PING``."""

    def __init__(self, url: str) -> None:
        self.url = urlparse(url)
        self.stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def ping(self) -> None:
        """Send ``PING`` and read its answer."""
        if self.stream is None:
            self.stream = await self._connect()
        reader, writer = self.stream
        writer.write(PING)
        if await reader.readline() != b"+PONG\r\n":
            raise RuntimeError("Redis did not answer PONG")

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.url.hostname, self.url.port or 6379)
        if self.url.password:
            password = self.url.password.encode()
            writer.write(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(password), password))
            if await reader.readline() != b"+OK\r\n":
                raise RuntimeError("Redis refused the password")
        return reader, writer


def create_round_trip_app(url: str) -> FastAPI:
    """``POST /predict``: parse, validate, one Redis round trip, constant."""
    app = FastAPI(title="online-ctr bare ceiling with a Redis round trip", telemetry=NO_TELEMETRY)
    redis = RoundTrip(url)

    @app.post("/predict")
    async def predict(body: PredictRequest) -> PredictResponse:
        await redis.ping()
        return CONSTANT

    return app


def main() -> None:
    """Serve the app with the same uvicorn settings as ``online-ctr api``."""
    serve(create_round_trip_app(os.environ["ROUND_TRIP_REDIS_URL"]))


if __name__ == "__main__":
    main()
