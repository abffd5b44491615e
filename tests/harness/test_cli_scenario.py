"""The ``wsfleet`` command's scenario surface without running a fleet: ``--version``, help that lists the
scenarios, a fleet-only install told what is missing, and bad input (an invalid scenario file, conflicting
arguments, a missing folder) answered with one precise line and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.processes import REPO_ROOT
from harness.scenarios.catalog import SCENARIOS


@pytest.fixture(autouse=True)
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command runs in a folder of its own, so a default run folder never lands in the checkout."""
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits (--help, --version, usage errors)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("wsfleet ")


def test_scenario_help_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scenario", "--help")
    assert code == 0 and "--from FILE" in out and "--repeat K" in out
    for name, spec in SCENARIOS.items():
        assert f"  {name:<20} {spec.description}" in out


def test_scenario_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scenario", "--list")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list(SCENARIOS)


@pytest.mark.parametrize(("argv", "message"), [
    (["scenario"], "name a scenario or give --from FILE"),
    (["scenario", "earthquake"], "unknown scenario 'earthquake'; known: crash, crash_notice, graceful"),
    (["scenario", "crash", "--from", "x.yaml"], "give a scenario name or --from FILE, not both"),
    (["scenario", "--from", "missing.yaml"], "missing.yaml: cannot read"),
    (["scenario", "--from", "{bad}"], "bad.yaml: faults[0].duration_s: 'leese' is neither"),
    (["scenario", "crash", "--workers", "1"], "--workers must be at least 2"),
    (["explore", "--workers", "1"], "--workers must be at least 2"),
    (["scenario", "crash", "--set", "lease_ms=20s"], "--set lease_ms=20s: must be a number"),
    (["scenario", "crash", "--set", "queue_url=x"], "--set queue_url: is set by the launcher"),
    (["up", "--set", "heartbeat_ms=30000"], "WSFLEET_HEARTBEAT_MS must be shorter than WSFLEET_LEASE_MS"),
    (["scenario", "crash", "--start"], "--start starts a LocalStack container: it needs --backend localstack"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          argv: list[str], message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nfaults:\n  - {kind: pause, target: worker-1, duration_s: [leese]}\n")
    argv = [str(bad) if a == "{bad}" else str(tmp_path / a) if a == "missing.yaml" else a for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message.replace("bad.yaml", str(bad)).replace("missing.yaml", str(tmp_path / "missing.yaml")) \
        .split("'leese'")[0] in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["region", "--variants", "gate,quake"], "unknown variant(s) quake; known: gate, no-gate, blog"),
    (["region", "--variants", ","], "unknown variant(s) (none given)"),
    (["region", "--timescale", "0"], "0.0 must be above 0 and at most 10"),
])
def test_region_bad_input_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"error: argument {argv[1]}: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["scenario", "crash", "--rate", "nan"], "argument --rate: nan must be above 0 and at most 1000"),
    (["up", "--rate", "inf"], "argument --rate: inf must be above 0 and at most 1000"),
    (["explore", "--rate", "1e9"], "argument --rate: 1000000000.0 must be above 0 and at most 1000"),
    (["explore", "--budget-s", "nan"], "argument --budget-s: nan must be a number of seconds above 0"),
    (["scenario", "crash", "--connections", "1" + "0" * 9],
     "argument --connections: 1000000000 must be at most 100000"),
    (["up", "--workers", "1" + "0" * 9], "argument --workers: 1000000000 must be at most 256"),
])
def test_absurd_numbers_on_the_command_line_are_usage_errors(
        capsys: pytest.CaptureFixture[str], nothing_starts: None, argv: list[str], message: str) -> None:
    """The bounds of a scenario file hold for the options that override it."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"error: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["up"], ["scenario", "crash"]])
def test_a_localstack_that_cannot_start_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setitem(sys.modules, "testcontainers.localstack", None)  # as where it is not installed
    code, _, err = run(capsys, *command, "--backend", "localstack", "--start")
    assert code == 2
    assert "cannot start LocalStack: testcontainers is not installed" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_fleet_root_must_be_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "explore", "--fleet-root", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a folder" in err


def test_without_the_harness_dependencies_wsfleet_says_what_is_missing() -> None:
    script = ("import sys; sys.modules['yaml'] = None; from harness.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    listing = subprocess.run([sys.executable, "-c", script, "scenario", "--list"], capture_output=True, text=True,
                             env=env, cwd=REPO_ROOT, timeout=60)
    assert listing.returncode == 2 and "Traceback" not in listing.stderr
    assert "needs the Python module 'yaml', which is not installed" in listing.stderr
    assert "pip install 'wsfleet[harness]'" in listing.stderr
    version = subprocess.run([sys.executable, "-c", script, "--version"], capture_output=True, text=True, env=env,
                             cwd=REPO_ROOT, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("wsfleet ")


def test_fleet_settings_reach_the_cluster_from_set_and_the_environment(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: ``wsfleet up`` built its config itself, so WSFLEET_MAX_CONNECTIONS was ignored."""
    import harness.cluster

    seen = []

    class Refused(harness.cluster.Cluster):
        def __init__(self, spec: harness.cluster.ClusterSpec) -> None:
            seen.append(spec)
            raise harness.cluster.ClusterError("not started in this test")

    monkeypatch.setattr(harness.cluster, "Cluster", Refused)
    monkeypatch.setenv("WSFLEET_MAX_CONNECTIONS", "2000")
    monkeypatch.setenv("WSFLEET_LEASE_MS", "30000")

    code, _, err = run(capsys, "up", "--set", "lease_ms=40000")

    assert code == 1 and "not started in this test" in err
    config = seen[0].fleet_config()
    assert (config.max_connections, config.lease_ms, config.profile) == (2000, 40000, "hardened")
    assert config.to_env()["WSFLEET_MAX_CONNECTIONS"] == "2000"  # what every worker and the router read


def test_region_prints_a_line_per_variant_and_exits_0_when_the_gated_ones_held(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command around the experiment (which ``harness/scenarios/test_region.py`` runs for real)."""
    from harness.region import failover
    from tests.harness.report.test_region import gated, ungated

    def fake(setup: failover.FailoverSetup, progress: object) -> dict:
        if setup.variant.name == "dynamodb":
            result = gated(kind="dynamodb", rto_bound_s=None, client_s=None, zone_answer="east", operator_s=7.2,
                           consumed_at_operator=0)
            return {**result, "variant": "dynamodb"}
        return gated() if setup.variant.gate else ungated()

    monkeypatch.setattr(failover, "run_region_failover", fake)
    code, out, err = run(capsys, "region", "--variants", "gate,no-gate,dynamodb", "--run-dir", str(tmp_path))
    assert code == 0 and "Traceback" not in err and (tmp_path / "report.html").exists()
    assert "gate: 0 of 6 streams consumed in both regions; RTO 6.50 s (bound 8.7 s)" in out
    assert "no-gate: 6 of 6 streams consumed in both regions; 6 conflicts resolved" in out
    assert "dynamodb: 0 of 6 streams consumed in both regions; RTO 6.50 s (7.2 s of it waiting for the operator)" in out


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet that refuses to start, so a command that wrongly accepts its folder ends at once (exit 1)."""
    import harness.cluster
    from harness.region import failover

    class Refused(harness.cluster.Cluster):
        def __init__(self, spec: harness.cluster.ClusterSpec, *_: object) -> None:
            raise harness.cluster.ClusterError("not started in this test")

    def refused(*_: object, **__: object) -> None:
        raise harness.cluster.ClusterError("not started in this test")

    monkeypatch.setattr(harness.cluster, "Cluster", Refused)
    monkeypatch.setattr(failover, "run_region_failover", refused)


@pytest.mark.parametrize("argv", [
    ["up", "--run-dir", "{dir}"], ["scenario", "crash", "--run-dir", "{dir}"], ["explore", "--out", "{dir}"],
    ["region", "--variants", "gate", "--run-dir", "{dir}"], ["report", "{run}", "--out", "{dir}"],
])
@pytest.mark.parametrize("occupied", ["another run", "a file"])
def test_a_run_never_writes_into_another_runs_folder_or_onto_a_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, nothing_starts: None, argv: list[str],
        occupied: str) -> None:
    """One run, one folder: a folder that holds something (for ``report --out``: a report) is refused without
    --force, and a file where a folder is expected is one clear line; nothing there is touched."""
    from tests.harness.report.histories import small_run  # a finished run folder to report on

    run_dir = tmp_path / "done"
    small_run(run_dir)
    target = tmp_path / "target"
    if occupied == "a file":
        target.write_text("mine")
    else:
        target.mkdir()
        (target / "report.md").write_text("an earlier report")
        (target / "history").mkdir()
    code, _, err = run(capsys, *[str(target) if a == "{dir}" else str(run_dir) if a == "{run}" else a for a in argv])
    assert code == 2, err
    expected = "is a file, not a folder" if occupied == "a file" else (
        "holds a report already" if argv[0] == "report" else "is not empty")
    assert expected in err and ("--force" in err or occupied == "a file")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert (target.read_text() == "mine") if occupied == "a file" else \
        (target / "report.md").read_text() == "an earlier report"


def test_report_out_overwrites_with_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.harness.report.histories import small_run

    run_dir, out = tmp_path / "done", tmp_path / "out"
    small_run(run_dir)
    out.mkdir()
    (out / "report.md").write_text("an earlier report")
    code, _, err = run(capsys, "report", str(run_dir), "--out", str(out), "--force")
    assert code == 0, err
    assert (out / "report.md").read_text() != "an earlier report"


@pytest.mark.parametrize(("text", "message"), [
    ("name: bomb\nfaults:\n  - kind: kill\n    target: worker-1\n    params:\n      a: &a [x, x, x, x, x, x, x, x]\n"
     "      b: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n      c: [*b, *b, *b, *b, *b, *b, *b, *b]\n",
     "not valid YAML: YAML aliases are not allowed (line 7)"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: .inf}]\n", "faults[0].at_s: must be finite"),
    ("name: x\nworkers: 1000000000\n", "workers: must be a whole number from 2 to 256"),
])
def test_a_hostile_scenario_file_never_starts_a_fleet(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      nothing_starts: None, text: str, message: str) -> None:
    (tmp_path / "s.yaml").write_text(text)
    code, _, err = run(capsys, "scenario", "--from", "s.yaml")
    assert code == 2 and f"wsfleet scenario: {tmp_path.resolve() / 's.yaml'}: {message}" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made


def test_explore_and_region_take_their_folders_from_where_they_were_started(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Relative folders name the folder the command started in, absolute from there on (the worker and router
    processes run from the checkout); the defaults are new per run."""
    from harness.explore import explore
    from harness.region import failover

    given: list[Path] = []

    def fake_explore(options: explore.ExploreOptions, progress: object) -> None:
        given.append(options.out)
        raise CliErrorStop()

    def fake_failover(setup: failover.FailoverSetup, progress: object) -> None:
        given.append(setup.run_dir)
        raise CliErrorStop()

    class CliErrorStop(Exception):
        pass

    monkeypatch.setattr(explore, "explore", fake_explore)
    monkeypatch.setattr(failover, "run_region_failover", fake_failover)
    for argv in (["explore", "--out", "mine"], ["explore"], ["region", "--variants", "gate", "--run-dir", "ours"],
                 ["region", "--variants", "gate"]):
        with pytest.raises(CliErrorStop):
            main(argv)
    here = tmp_path.resolve()
    assert given[0] == here / "mine" and given[2] == here / "ours" / "gate"
    assert given[1].parent == here / "runs" / "explore" and given[3].parent.parent == here / "runs" / "region"
    assert (here / "runs" / "explore" / "latest").resolve() == given[1]


@pytest.mark.parametrize("argv", [("--outputs", "outputs.json"), ("--terraform-dir", "tf"), ("--logs-wait", "3"),
                                  ("--account", "123456789012"), ("--dry-run",)])
def test_an_aws_option_given_to_a_local_run_is_refused_not_ignored(capsys: pytest.CaptureFixture[str],
                                                                     argv: tuple[str, ...]) -> None:
    code, _, err = run(capsys, "scenario", "crash", *argv)
    assert code == 2 and err.strip().endswith("only with --backend aws (this run is local)")
    assert argv[0] in err and len(err.strip().splitlines()) == 1
    assert not Path("runs").exists()  # refused before any run folder was made


def test_an_abbreviated_option_is_an_error_not_a_guess(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "scenario", "crash", "--out", "outputs.json")  # once read as --outputs
    assert code == 2 and "unrecognized arguments: --out" in err
