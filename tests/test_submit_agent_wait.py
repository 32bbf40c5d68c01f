"""A submission while the head's dashboard agent is not there: Ray's job head answers "No available agent
to submit job, please try again later" (after waiting 10 s of its own), and clawgym posts it again for a
bounded time instead of failing the launch at once. Seen in CI: a SLURM allocation's fresh head on a loaded
node, submitted to as soon as its node joined.

A real head whose agent cannot come up (its agent port is held by a listener here), so every answer is
Ray's own refusal."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time

import pytest

from clawgym.backends.head import ports
from clawgym.launch import rayjob
from clawgym.launch.rayjob import dashboard_responds
from tests.fixtures.two_nodes import _ray_start, _stop_group


@pytest.fixture
def head_without_agent():
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("0.0.0.0", 0))
    held.listen()
    temp = tempfile.mkdtemp(prefix="cgna-", dir="/tmp")
    env = {**os.environ, **{name: str(ports.free_port()) for name in ports.PORT_ENV}}
    env.pop("RAY_ADDRESS", None)
    dash = ports.free_port()
    others = [str(ports.free_port()) for _ in range(4)]
    head = _ray_start(["--head", "--port", str(ports.free_port()), "--dashboard-port", str(dash),
                       "--dashboard-host", "127.0.0.1", "--num-cpus", "1", "--temp-dir", temp,
                       "--dashboard-agent-listen-port", str(held.getsockname()[1]),
                       "--dashboard-agent-grpc-port", others[0], "--metrics-export-port", others[1],
                       "--runtime-env-agent-port", others[2], "--ray-client-server-port", others[3]], env)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.time() + 120
        while not dashboard_responds(address):
            assert time.time() < deadline and head.poll() is None, "the head's dashboard did not come up"
            time.sleep(0.5)
        yield address
    finally:
        _stop_group(head)
        held.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_submission_ray_refuses_for_want_of_an_agent_is_posted_again_then_refused_with_rays_words(
        head_without_agent):
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(head_without_agent)
    posts, said = [], []

    def post() -> str:
        posts.append(time.monotonic())
        return client.submit_job(entrypoint="true")

    with pytest.raises(RuntimeError, match=rayjob.NO_AGENT_YET) as refused:
        # Ray itself waits 10 s for an agent before each refusal: 12 s leaves room for exactly one more post.
        rayjob.post_when_agent_ready(post, wait_s=12.0, say=said.append)
    # The launch's error then says what is missing and where to look, not to check the working dir.
    fix = rayjob.refusal_fix(refused.value, head_without_agent)
    assert "dashboard agent did not register" in fix and "dashboard_agent.log" in fix and "paths.slime" not in fix
    # Ray's answer came (after its own wait), clawgym said so once and posted again before giving up.
    assert len(posts) >= 2
    assert len(said) == 1 and "posting it again for up to 12 s" in said[0]
    assert client.list_jobs() == []  # no job was made by a refused post


def test_any_other_refusal_is_raised_at_once():
    posts = []

    def post() -> str:
        posts.append(1)
        raise RuntimeError("Request failed with status code 400: bad runtime env")

    with pytest.raises(RuntimeError, match="bad runtime env") as refused:
        rayjob.post_when_agent_ready(post, wait_s=60.0)
    assert posts == [1]
    assert "paths.slime" in rayjob.refusal_fix(refused.value, "http://127.0.0.1:8265")
