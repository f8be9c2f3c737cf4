"""The executor: what handler authors import (``RunContext``, ``handler``).

The worker's machinery (worker, courier, heartbeat) lives in submodules and is
not part of the handler-facing surface.
"""

from app.executor.context import RunContext
from app.handlers import handler

__all__ = ["RunContext", "handler"]
