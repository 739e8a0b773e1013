"""What ``/healthz`` and ``/readyz`` answer."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    Field,
)


class HealthResponse(BaseModel):
    """The process is alive."""

    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    """Redis answers and a worker has sent a heartbeat recently."""

    ready: bool = True
    heartbeat_age_s: float = Field(examples=[0.8])
    log_rollback: str | None = Field(
        default=None,
        description="The last time a learner found the model's log side gone back behind its "
        "state shards (a failover to a lagging replica): what was lost and that learning went "
        "on (docs/redis-cluster.md). Kept in the model's meta until the model is deleted or "
        "replaced; null if it never happened. Readiness is unaffected: learning goes on.",
        examples=[None],
    )
    shard_rollback: str | None = Field(
        default=None,
        description="The last time a learner found state shards behind the last commit that "
        "wrote to them, the redo log trimmed past it (a shard's failover to a lagging replica "
        "with OCTR_REPLICA_ACKS=0): which shards lost updates. Kept like log_rollback; null if "
        "it never happened.",
        examples=[None],
    )
