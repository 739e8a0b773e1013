"""``GET /healthz`` (the process answers) and ``GET /readyz`` (it can do its job)."""

from __future__ import annotations

from fastapi import APIRouter

from online_ctr.store.memory import redis_memory
from online_ctr.store.stamps import reports
from service.api.deps import ServedDep
from service.api.error_schemas import error_responses
from service.api.errors import NotReadyError
from service.api.health_schemas import HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> HealthResponse:
    """Liveness: answers without touching Redis, so a Redis outage never restarts the API."""
    return HealthResponse()


@router.get("/readyz", responses=error_responses(503))
async def readyz(served: ServedDep) -> ReadyResponse:
    """Readiness: Redis answers and has room to write, and a worker heartbeat is recent
    enough; 503 says why not. A rollback a learner found is reported: of the model's log side
    in ``log_rollback``, of its state shards in ``shard_rollback``."""
    memory = await redis_memory(served.store.redis)
    if memory.full:
        # First: at the limit the workers' heartbeats are refused too, and would be blamed.
        raise NotReadyError(
            f"Redis is at its memory limit ({memory.used / 2**20:.1f} of "
            f"{memory.limit / 2**20:.1f} MiB used): "
            "/learn is refused and learning waits, /predict still answers; free memory or "
            "raise OCTR_REDIS_MAXMEMORY (the maxmemory of an external Redis)"
        )
    age = await served.heartbeat_age()
    if age is None:
        raise NotReadyError(f"no worker has sent a heartbeat for model {served.name!r} yet")
    if age > served.max_heartbeat_age_s:
        raise NotReadyError(
            f"the newest worker heartbeat for model {served.name!r} is {age:.1f}s old "
            f"(limit {served.max_heartbeat_age_s:g}s): are the workers running?"
        )
    # A rollback of the log side, found and repaired by the learner: said, not a 503 (the
    # model learns and serves correctly again; workers/rollback.py says what was lost).
    found = await reports(served.store)
    return ReadyResponse(heartbeat_age_s=age, log_rollback=found.log, shard_rollback=found.shards)
