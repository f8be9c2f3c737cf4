"""What a process tells its operators: logs, traces, and a worker's Prometheus port."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from app.settings.group import SettingsGroup

# a listening address: IPv4, IPv6 (hex and colons) or a DNS name, nothing else
_HOST = re.compile(r"[A-Za-z0-9.:-]{1,253}")


class TelemetrySettings(SettingsGroup):
    """Logs, traces and worker metrics."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level of every process"
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text for people, json for log pipelines: one object per line with "
        "run_id, owner_id and fence where they apply",
    )
    tracing: Literal["off", "otlp", "console"] = Field(
        default="off",
        description="OpenTelemetry traces (needs the [otel] extra): otlp exports over "
        "OTLP/HTTP to the endpoint of the standard OTEL_EXPORTER_OTLP_* variables, console "
        "prints spans to stderr; off imports nothing. OTEL_SDK_DISABLED=true also turns it off",
    )
    worker_metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port where a worker serves Prometheus /metrics; 0: off",
    )
    worker_metrics_host: str = Field(
        default="127.0.0.1",
        description="Address a worker's metrics port listens on; beyond loopback it needs keys",
    )
    worker_metrics_max_connections: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="Connections a worker's metrics port serves at once; more get 503",
    )

    @field_validator("worker_metrics_host")
    @classmethod
    def _check_worker_metrics_host(cls, value: str) -> str:
        if not _HOST.fullmatch(value):
            raise ValueError("must be an IP address or a host name")
        return value
