"""``GET /models/{name}/snapshot`` streams a model out as a snapshot file; ``PUT`` streams one
in, under any name. Neither holds the model in memory: a chunk of rows at a time.

Both work on any model in this service's Redis, not only the one it serves (an export is
read-only; an import creates the model with the file's rule and hyper-parameters and this
service's layout). Importing under the name this service serves needs the file's rule,
hyper-parameters and hashing to be the ones it runs, since it goes on serving that model.
Both are :class:`online_ctr.admin.ModelsAdmin`'s, as ``online-ctr export|import`` runs them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse

from service.api.access import AdminName
from service.api.deps import CatalogDep, ServedDep
from service.api.error_schemas import ErrorResponse, error_responses
from service.api.model_schemas import SnapshotImportedResponse
from service.api.routes.models import AdminDep

router = APIRouter(tags=["models"])

#: The media type of a snapshot file.
SNAPSHOT_TYPE = "application/vnd.online-ctr.snapshot"
_FILE = {"schema": {"type": "string", "format": "binary"}}
_EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The snapshot file, streamed (the model at one commit, while it learns).",
        "content": {SNAPSHOT_TYPE: _FILE},
    },
    404: {"model": ErrorResponse, "description": "No model of that name in this Redis."},
    **error_responses(422, 503),
}
_IMPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorResponse,
        "description": "The name is taken (pass `replace=true`), is being imported, is a "
        "group's, or is the model this service serves and the file's rule or hyper-parameters "
        "differ; or the service holds its most models (`OCTR_MAX_MODELS`). Nothing is left "
        "in Redis.",
    },
    422: {
        "model": ErrorResponse,
        "description": "Not a valid snapshot: wrong magic or format version, truncated, a "
        "corrupt chunk (CRC32) or file (SHA-256), an unknown rule, invalid hyper-parameters "
        "or settings, or a step, count, log-loss sum or state row no model can have; "
        "`detail` names the field. Nothing is left in Redis.",
    },
    **error_responses(408, 415, 503),
}


@router.get(
    "/models/{name}/snapshot",
    response_class=StreamingResponse,
    responses=_EXPORT_RESPONSES,
)
async def export_snapshot(name: AdminName, admin: AdminDep) -> StreamingResponse:
    """Export the model (rule, hyper-parameters, every feature's state, step and counters)
    as one versioned file, streamed. Taken while the model learns, the file is its exact
    state at one step."""
    export = await admin.export(name)
    headers = {"Content-Disposition": f'attachment; filename="{name}.octr"'}
    return StreamingResponse(export.chunks(), media_type=SNAPSHOT_TYPE, headers=headers)


@router.put(
    "/models/{name}/snapshot",
    status_code=status.HTTP_201_CREATED,
    responses=_IMPORT_RESPONSES,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A snapshot file, as `GET /models/{name}/snapshot` or "
            "`online-ctr train-batch --out` wrote it (e.g. `curl -T model.octr`).",
            "content": {SNAPSHOT_TYPE: _FILE, "application/octet-stream": _FILE},
        }
    },
)
async def import_snapshot(
    name: AdminName,
    request: Request,
    served: ServedDep,
    catalog: CatalogDep,
    admin: AdminDep,
    replace: Annotated[
        bool, Query(description="Replace a model of that name (all its keys) if there is one.")
    ] = False,
) -> SnapshotImportedResponse:
    """Import a snapshot file as model ``name``, streamed. The model takes the file's rule,
    hyper-parameters, hashing, state, step and counters, and this service's layout
    (``OCTR_STATE_BUCKETS``, ``OCTR_STATE_SHARDS``)."""
    # The model this service serves must stay the one it runs; any other is recorded in the
    # registry, servable by name (a full registry refuses it before the upload is read).
    expect = served.store.spec if name == served.name else None
    imported = await admin.import_snapshot(name, request.stream(), replace, expect)
    if name != served.name:  # what was known of an older model of that name is stale
        catalog.forget(name)
    return SnapshotImportedResponse(
        name=imported.name,
        rule=imported.rule,
        global_step=imported.t,
        features_tracked=imported.features_tracked,
        nonzero_weights=imported.nonzero_weights,
        rows=imported.rows,
    )
