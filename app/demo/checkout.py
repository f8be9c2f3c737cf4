"""Demo handlers whose code changes between two releases: ``leasehold demo deploy``.

``LEASEHOLD_DEMO_RELEASE`` (``v1`` unless set, read at each call) stands for the code a
worker was deployed with, as ``LEASEHOLD_BUILD_ID`` names it. Release v2 sends the
receipt before the charge:

* ``demo.checkout`` changes order with no guard: a run that parked on v1 (charged,
  waiting for ``shipped``) and wakes on v2 would ask for the receipt where it recorded
  the charge — the drift check parks it ``version_drift`` instead;
* ``demo.checkout_patched`` guards the change with ``ctx.patched("receipt-first")``:
  runs that began on v1 keep the old order on v2, new runs take the new one.

The "charge" and the "receipt" are recorded effects that return a string: no provider.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from app.executor import RunContext, handler

RELEASE_ENV = "LEASEHOLD_DEMO_RELEASE"


class CheckoutInput(BaseModel):
    """The order."""

    order: str = Field(default="order-1", max_length=100)


def _release() -> str:
    return os.environ.get(RELEASE_ENV, "v1")


async def _charge(ctx: RunContext, order: str) -> str:
    return str(await ctx.effect("charge", lambda key: _done(f"charged {order}", key)))


async def _receipt(ctx: RunContext, order: str) -> str:
    return str(await ctx.effect("receipt", lambda key: _done(f"receipt for {order}", key)))


async def _done(what: str, key: str) -> str:
    return f"{what} ({key})"


async def _old_order(ctx: RunContext, order: str) -> list[Any]:
    charge = await _charge(ctx, order)
    shipped = await ctx.wait_for_signal("shipped")
    return [charge, shipped, await _receipt(ctx, order)]


@handler("demo.checkout")
async def checkout(ctx: RunContext, params: CheckoutInput) -> dict[str, Any]:
    """Charge, wait for ``shipped``, send the receipt (v2: the receipt first, unguarded)."""
    if _release() == "v1":
        steps = await _old_order(ctx, params.order)
    else:
        receipt = await _receipt(ctx, params.order)
        steps = [receipt, await _charge(ctx, params.order), await ctx.wait_for_signal("shipped")]
    return {"release": _release(), "steps": steps}


@handler("demo.checkout_patched")
async def checkout_patched(ctx: RunContext, params: CheckoutInput) -> dict[str, Any]:
    """As ``demo.checkout``, with v2's change behind ``ctx.patched("receipt-first")``."""
    if _release() != "v1" and await ctx.patched("receipt-first"):
        receipt = await _receipt(ctx, params.order)
        steps = [receipt, await _charge(ctx, params.order), await ctx.wait_for_signal("shipped")]
        return {"release": _release(), "patched": True, "steps": steps}
    return {"release": _release(), "patched": False, "steps": await _old_order(ctx, params.order)}
