"""The Postgres store's own settings (DESIGN §18), a mixin of the server's settings: where its
tables are and how many connections it may open. The store URL, the lease, the takeovers and
the retention are the server's (`app.settings`), shared with Redis."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.runs.stores.postgres_names import check_schema_name


class StoreSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FINISHLINE_", env_file=".env", extra="ignore", populate_by_name=True
    )

    pg_schema: str = Field(
        "finishline",
        description="Postgres store: the schema its tables live in (made and migrated at "
        "start-up); deployments sharing a database each use their own.",
    )
    pg_pool_size: int = Field(
        10,
        ge=1,
        le=1000,
        description="Postgres store: the most connections one replica opens (besides the one "
        "that listens for NOTIFY); a request that cannot have one within 5 s gets 503.",
    )

    @field_validator("pg_schema")
    @classmethod
    def _schema(cls, value: str) -> str:
        return check_schema_name(value)
