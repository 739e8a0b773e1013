"""A Python client of the online-ctr service (needs only httpx: ``pip install httpx``).

``Client`` blocks, ``AsyncClient`` is its asyncio twin; both batch, retry with backoff
(honoring ``Retry-After``), send an ``Idempotency-Key`` with every ``/learn`` request and keep
connections alive. Example::

    from online_ctr.client import Client

    with Client("http://127.0.0.1:8000", api_key=KEY) as ctr:
        ctr.learn({"site": "news.example", "device": "mobile"}, label=1)
        print(ctr.predict({"site": "news.example"}).probability)
"""

from online_ctr.client.aio import AsyncClient
from online_ctr.client.errors import (
    ApiError,
    ClientError,
    InvalidExampleError,
    OnlineCtrError,
    ServerError,
    UnreachableError,
)
from online_ctr.client.results import (
    Accepted,
    Explanation,
    FeatureMap,
    ModelDeleted,
    ModelImported,
    ModelInfo,
    Prediction,
    Term,
)
from online_ctr.client.retry import Retry
from online_ctr.client.sync import Client

#: FeatureMap's former name, kept so that callers' imports of it still work (in the tree,
#: ``Features`` is a batch's distinct ids, :mod:`online_ctr.learning.learner`).
Features = FeatureMap

__all__ = [
    "Accepted",
    "ApiError",
    "AsyncClient",
    "Client",
    "ClientError",
    "Explanation",
    "FeatureMap",
    "Features",
    "InvalidExampleError",
    "ModelDeleted",
    "ModelImported",
    "ModelInfo",
    "OnlineCtrError",
    "Prediction",
    "Retry",
    "ServerError",
    "Term",
    "UnreachableError",
]
