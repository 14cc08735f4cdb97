"""The environment the runners give a rank (runners/launch/rankenv.py) against what the rank side takes back (inject/ddptui_scope.py)."""
from __future__ import annotations

import os

import pytest

from ddptui.runners.launch import rankenv
from ddptui.runners.inject import ddptui_scope

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(30)]


def test_the_rank_sides_names_are_the_only_copy():
    assert rankenv.PLUMBING is ddptui_scope.PLUMBING and rankenv.USER_ENV == ddptui_scope.USER_ENV
    assert os.path.realpath(rankenv.INJECT_DIR) == ddptui_scope.INJECT_DIR


@pytest.mark.parametrize("user", [
    {"PYTHONPATH": "/my/lib", "PYTHONUNBUFFERED": None},
    {"PYTHONPATH": None, "PYTHONUNBUFFERED": "1"},
    {"PYTHONPATH": None, "PYTHONUNBUFFERED": None},
])
def test_what_the_runner_sets_the_rank_takes_back_to_the_users_own(user, monkeypatch):
    for k in rankenv.PLUMBING:
        monkeypatch.delenv(k, raising=False)
    wanted = {k: v for k, v in user.items() if v is not None}
    env = {"HOME": "/h", **rankenv.activation(wanted, dashboard_pid=7)}
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(rankenv.INJECT_DIR) and env["DDPTUI_PID"] == "7"
    assert set(env) - {"HOME"} <= set(ddptui_scope.ACTIVATION) | set(ddptui_scope.PLUMBING)
    ddptui_scope.apply(ddptui_scope.user_env(env), env)
    assert env == {"HOME": "/h", **wanted}  # ours gone, the user's own values back
