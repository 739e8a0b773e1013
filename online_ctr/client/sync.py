"""The blocking client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType

import httpx

from online_ctr.client import answers, operations, snapshots
from online_ctr.client.errors import OnlineCtrError
from online_ctr.client.operations import MAX_BATCH, Call, LabelledExample, Operation, Part, Result
from online_ctr.client.results import (
    Accepted,
    FeatureMap,
    ModelDeleted,
    ModelImported,
    ModelInfo,
    Prediction,
)
from online_ctr.client.retry import Retry, attempts


class Client:
    """A client of one online-ctr service, over one pooled keep-alive HTTP connection set.

    ``api_key`` is sent as ``Authorization: Bearer``; ``model`` (default: the one the service
    serves) is sent as ``?model=`` with predictions and feedback, unless a call names its own
    (``model=``); ``timeout_s`` bounds each
    attempt, ``retry`` the attempts (see :class:`Retry`); ``max_batch`` is the most examples
    per request (the service's ``OCTR_MAX_EXAMPLES_PER_REQUEST``). ``transport`` replaces
    httpx's network transport (a proxy, a mounted ASGI app). Errors are
    :class:`OnlineCtrError` subclasses. Labelling served predictions by prediction id
    (``POST /learn`` with joins on) is not here yet, though the service has it (see
    :mod:`online_ctr.client.operations`).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 10.0,
        retry: Retry = Retry(),  # noqa: B008 (frozen, so sharing the default is safe)
        max_batch: int = MAX_BATCH,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model_name, self.retry, self.max_batch, self.timeout_s = (
            model,
            retry,
            max_batch,
            timeout_s,
        )
        self._http = httpx.Client(
            base_url=base_url,
            headers=operations.headers(api_key),
            timeout=timeout_s,
            transport=transport,
        )

    def predict(
        self,
        features: FeatureMap,
        explain: bool = False,
        explain_top: int = 10,
        *,
        uncertainty: bool = False,
        model: str | None = None,
    ) -> Prediction:
        """The click probability of one example; with ``explain``, its ``explanation`` too
        (the ``explain_top`` largest contributions to its logit, 1-1000); with
        ``uncertainty``, its ``uncertainty``. ``model``: this call's model or group (default:
        the client's)."""
        top = explain_top if explain else None
        predicted = operations.predict(features, self._model(model), top, uncertainty)
        return self._run(predicted)

    def predict_many(
        self,
        rows: Iterable[FeatureMap],
        explain: bool = False,
        explain_top: int = 10,
        *,
        uncertainty: bool = False,
        model: str | None = None,
    ) -> list[Prediction]:
        """The click probabilities of many examples, in order, ``max_batch`` per request;
        with ``explain`` and ``uncertainty``, each one's too (as :meth:`predict`)."""
        top = explain_top if explain else None
        predicted = operations.predict_many(
            rows, self._model(model), self.max_batch, top, uncertainty
        )
        return self._run(predicted)

    def learn(
        self,
        features: FeatureMap,
        label: int,
        idempotency_key: str | None = None,
        weight: float | None = None,
        *,
        model: str | None = None,
    ) -> Accepted:
        """Send one labelled example (``label`` 1: clicked, 0: not; ``weight`` its importance
        weight, default 1) under ``idempotency_key`` (by default a new one, kept on retries:
        the example is accepted once), to ``model`` (default: the client's). Another label
        is an :class:`InvalidExampleError`, and nothing is sent."""
        key = idempotency_key
        learned = operations.learn(features, label, self._model(model), key, weight)
        return self._run(learned)

    def learn_many(
        self, examples: Iterable[LabelledExample], *, model: str | None = None
    ) -> Accepted:
        """Send ``(features, label)`` pairs (or ``(features, label, weight)``) in order,
        ``max_batch`` per request, each with an ``Idempotency-Key`` of its own kept on its
        retries: each is accepted exactly once; to ``model`` (default: the client's)."""
        learned = operations.learn_many(examples, self._model(model), self.max_batch)
        return self._run(learned)

    def model(self, name: str) -> ModelInfo:
        """A model's rule, hyper-parameters and progress (needs the ``admin`` scope)."""
        return self._run(operations.model_info(name))

    def delete_model(self, name: str) -> ModelDeleted:
        """Delete a model, its state and its unlearned feedback (needs ``admin``)."""
        return self._run(operations.delete_model(name))

    def export_model(self, name: str, file: snapshots.Target) -> int:
        """Stream model ``name`` into a snapshot ``file`` (a path, or a binary file open for
        writing); the bytes written. Needs the ``admin`` scope."""
        saved: list[int] = []

        def attempt(timeout_s: float) -> httpx.Response:
            request = self._http.build_request("GET", snapshots.route(name), timeout=timeout_s)
            response = self._http.send(request, stream=True)
            try:
                if response.is_success:  # a connection lost mid-file is retried whole
                    saved.append(_save(response.iter_bytes(), file))
                else:
                    response.read()  # the error's JSON, for its message
            finally:
                response.close()
            return response

        answers.check(self._retrying(attempt))
        return saved[-1]

    def import_model(
        self, file: snapshots.Target, name: str, *, replace: bool = False
    ) -> ModelImported:
        """Stream a snapshot ``file`` (a path, or a binary file) in as model ``name``; with
        ``replace``, in place of a model of that name. Needs the ``admin`` scope."""
        upload = snapshots.Upload(file)
        params = {"replace": "true"} if replace else {}
        headers = {"Content-Type": snapshots.SNAPSHOT_TYPE}

        def attempt(timeout_s: float) -> httpx.Response:
            with upload.opened() as stream:  # from its start, for each attempt
                request = self._http.build_request(
                    "PUT", snapshots.route(name), content=snapshots.pieces(stream),
                    params=params, headers=headers, timeout=timeout_s,
                )  # fmt: skip
                return self._http.send(request)

        retry = self.retry if upload.repeatable else Retry(attempts=1)
        return answers.imported(self._retrying(attempt, retry))

    def _model(self, model: str | None) -> str | None:
        """The model of a call: its own, or else the client's."""
        return self.model_name if model is None else model

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, operation: Operation[Part, Result]) -> Result:
        parts: list[Part] = []
        done = 0
        try:  # the calls too: one is built, its examples checked, after the last is sent
            for call in operation.calls:
                parts.append(operation.parse(self._send(call)))
                done += call.examples
        except OnlineCtrError as error:
            error.examples_done = done
            raise
        return operation.combine(parts)

    def _send(self, call: Call) -> httpx.Response:
        return self._retrying(
            lambda timeout_s: self._http.send(call.request(self._http, timeout_s))
        )

    def _retrying(
        self, attempt: Callable[[float], httpx.Response], retry: Retry | None = None
    ) -> httpx.Response:
        """Make ``attempt`` (one request, given its timeout) as the retry loop says."""
        for step in attempts(retry or self.retry, self.timeout_s):
            if step.wait_s:
                time.sleep(step.wait_s)
            try:
                step.answered(attempt(step.timeout_s))
            except httpx.TransportError as error:
                step.failed(error)
        return step.answer


def _save(pieces: Iterator[bytes], file: snapshots.Target) -> int:
    download = snapshots.Download(file)
    try:
        for piece in pieces:
            download.write(piece)
    except BaseException:
        download.abandon()
        raise
    return download.done()
