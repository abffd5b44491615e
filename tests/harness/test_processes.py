"""Child processes run from another checkout when asked (``wsfleet explore --fleet-root``): that checkout
comes first on their import path, ahead of this repository."""

from __future__ import annotations

import os
from pathlib import Path

from harness.cluster import Cluster, ClusterSpec
from harness.processes import REPO_ROOT, python_env, spawn


def test_python_env_puts_the_given_checkout_first(tmp_path: Path) -> None:
    paths = python_env({"X": "1"}, root=tmp_path)["PYTHONPATH"].split(os.pathsep)
    assert paths[:2] == [str(tmp_path), str(REPO_ROOT)]
    assert python_env()["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT)


def test_a_child_imports_the_fleet_package_of_the_other_checkout(tmp_path: Path) -> None:
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "__init__.py").write_text("")
    (tmp_path / "fleet" / "marker.py").write_text("import json\nprint(json.dumps({'file': __file__}))\n")
    child = spawn("marker", ["python", "-m", "fleet.marker"], tmp_path / "marker.log",
                  env=python_env(root=tmp_path), cwd=tmp_path)
    child.stop(grace_s=1.0)
    assert Path(child.ready["file"]).resolve() == (tmp_path / "fleet" / "marker.py").resolve()


def test_a_cluster_runs_its_fleet_from_the_given_root(tmp_path: Path) -> None:
    assert Cluster(ClusterSpec(run_dir=tmp_path, fleet_root=tmp_path)).fleet_root == tmp_path.resolve()
    assert Cluster(ClusterSpec(run_dir=tmp_path)).fleet_root == REPO_ROOT.resolve()


def test_a_harness_thread_leaves_ctrl_c_to_the_main_thread() -> None:
    """SIGINT and SIGTERM blocked in the thread, not in its creator: the kernel delivers them to the main
    thread, where Python runs the handlers and a join or a sleep is interrupted at once."""
    import signal
    import threading

    from harness.processes import start_thread

    seen: list[set[signal.Signals]] = []
    thread = start_thread(threading.Thread(target=lambda: seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))))
    thread.join()
    assert {signal.SIGINT, signal.SIGTERM} <= seen[0]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_child_started_from_a_harness_thread_still_answers_sigterm(tmp_path: Path) -> None:
    """A fault restarts a worker from a runner thread, whose SIGINT and SIGTERM are blocked; the child
    inherited that mask, ignored every SIGTERM, and each stop of it waited the whole grace, then killed it
    (the graceful scenario's 25 s teardown)."""
    import signal
    import threading

    from harness.processes import start_thread

    script = ("import json, signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
              "print(json.dumps({'ready': True}), flush=True)\n"
              "time.sleep(60)\n")
    started = []
    start_thread(threading.Thread(target=lambda: started.append(
        spawn("sleeper", ["python", "-c", script], tmp_path / "sleeper.log")))).join()
    [child] = started
    child.signal(signal.SIGTERM)
    assert child.wait(10.0) == 0
