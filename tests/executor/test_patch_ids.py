"""A change id (``ctx.patched``, ``ctx.deprecate_patch``) is a short token or refused."""

from __future__ import annotations

from typing import Any, cast

import pytest

from app.errors import InvalidEffect
from app.executor.effects import EffectLedger


def ledger() -> EffectLedger:
    # the id check reads nothing of the ledger: no store, no lease
    return cast(EffectLedger, object.__new__(EffectLedger))


@pytest.mark.parametrize(
    "patch_id", ["", "a" * 129, "swap-é", "two words", "a:b", "~x", 7, None], ids=repr
)
def test_a_malformed_patch_id_is_refused(patch_id: Any) -> None:
    with pytest.raises(InvalidEffect, match="patch id"):
        ledger().check_patch_id(patch_id)
