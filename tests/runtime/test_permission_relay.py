from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, RpcError
from protocol.messages.host import PermissionRequestParams, PermissionWithdrawnParams
from runtime.permission_relay import PermissionRelay


async def test_a_withdrawal_that_overtakes_its_request_refuses_it() -> None:
    relay = PermissionRelay()
    relay.withdrawn(PermissionWithdrawnParams("s", "perm-1"))
    with pytest.raises(RpcError) as info:
        await relay.request(PermissionRequestParams("s", "perm-1", "c1", "Write", "{}"))
    assert info.value.code == ErrorCode.PERMISSION_WITHDRAWN
    assert relay.pending_calls() == set()
