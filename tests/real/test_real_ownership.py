"""The REAL engines honour the per-start secret crawdad hands them through the environment, the way
`crawdad/serving/engines/*.py` assumes (issue 51): llama-cpp-python's server reads `API_KEY`
(its settings' `api_key`, through pydantic-settings); with it, a missing or wrong key is refused
on /v1/models. A stranger already on the planned port (a llama-cpp-python started by hand,
without a key) is never taken for crawdad's own: the start moves to another port and proves its
own server by the key and by the listening socket.

vLLM's side (it reads `VLLM_API_KEY`; a missing or wrong key refused on /v1/models, /health open,
proven by key and socket) is checked on the vLLM that crawdad starts for the served run in
test_real_served.py, rather than on a vLLM started here for it alone (~30 CPU s a start).

Never run where the real servers are not installed (`require` fails, naming the install line).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from crawdad.config import ServingConfig
from crawdad.serving.base import Plan
from crawdad.serving.ports import with_port
from crawdad.serving.supervisor import Supervisor

from .conftest import require
from .servers import free_port, llamacpp_server
from .test_real_served import bearer, llamacpp_plan, servers_left

pytestmark = pytest.mark.real


async def test_real_servers_take_their_key_from_the_environment_and_a_stranger_is_passed_by(
    tmp_path: Path,
) -> None:
    require("llamacpp")
    stranger = llamacpp_server(port=free_port()).start()  # no key: it answers anyone
    try:
        suites = frozenset(p.pid for p in servers_left())
        llama = with_port(llamacpp_plan(), stranger.port)
        plan = Plan(servers=[llama])
        serving = ServingConfig(startup_timeout=300)
        sup = Supervisor(plan, serving, tmp_path, progress=False, say=lambda _: None)
        await sup.start()
        try:
            started = {r.key: r for r in sup.records()}
            assert started[llama.key].port != stranger.port  # moved off the stranger's port
            assert any("is taken" in note for note in sup.plan.notes)
            async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
                for server in sup.plan.servers:
                    record = started[server.key]
                    assert record.proven_by == ["api key", "socket"], record
                    key = sup.secret_of(server)
                    assert key and key not in " ".join(record.command)
                    models = f"{server.base_url}/models"
                    assert (await client.get(models)).status_code == 401
                    assert (await client.get(models, headers=bearer("wrong"))).status_code == 401
                    ours = await client.get(models, headers=bearer(key))
                    assert ours.status_code == 200
                    assert server.served_name in {m["id"] for m in ours.json()["data"]}
        finally:
            await sup.stop()
        assert servers_left(besides=suites | {stranger.pid or 0}) == []
    finally:
        stranger.stop()
