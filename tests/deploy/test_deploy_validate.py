"""terraform itself, where its binary is installed: `terraform fmt` finds nothing to change, and
`terraform test` (terraform/tests/*.tftest.hcl) validates the configuration against the AWS provider's
real schema and plans it against mocked AWS, single-region and with a standby region.  The provider is
installed offline from a mirror directory (WSFLEET_TF_PLUGIN_DIR, default /opt/tf-plugins).

The archive provider is not in the mirror, so modules/package (the only module that needs it, and which
the plans override anyway) is replaced in the tested copy by a stand-in with the same inputs and outputs;
every other module is tested as written.  Skipped, with the reason, where terraform or the AWS provider
is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.deploy_hcl import load_module
from tests.deploy.deploy_tree import TERRAFORM, copy_tree

PLUGIN_DIR = Path(os.environ.get("WSFLEET_TF_PLUGIN_DIR", "/opt/tf-plugins"))
AWS_PROVIDER = PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws"
TIMEOUT_S = 120
ARCHIVE_REQUIREMENT = re.compile(r"\n\s*archive = \{[^}]*\}")


def _terraform() -> str:
    binary = shutil.which("terraform")
    if binary is None:
        pytest.skip("terraform is not installed here")
    return binary


def _run(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "terraformrc"
    config.touch()
    env = {
        **os.environ,
        "CHECKPOINT_DISABLE": "1",  # no version check over the network
        "TF_IN_AUTOMATION": "1",
        "TF_CLI_CONFIG_FILE": str(config),
        "TF_PLUGIN_CACHE_DIR": "",
    }
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_terraform_fmt_changes_nothing(tmp_path: Path) -> None:
    command = [_terraform(), "fmt", "-check", "-recursive", "-diff", "-no-color", str(TERRAFORM)]
    result = _run(command, TERRAFORM, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _stand_in_package(root: Path) -> None:
    """Replace modules/package by a module with the same outputs and no provider."""
    package = root / "modules" / "package"
    outputs = sorted(load_module(package).outputs)
    variables = sorted(load_module(package).variables)
    shutil.rmtree(package)
    package.mkdir()
    (package / "main.tf").write_text(
        "".join(f'variable "{name}" {{\n  type = string\n}}\n\n' for name in variables)
        + "".join(f'output "{name}" {{\n  value = "stand-in"\n}}\n\n' for name in outputs),
        encoding="utf-8",
    )
    versions = root / "versions.tf"
    text, replaced = ARCHIVE_REQUIREMENT.subn("", versions.read_text(encoding="utf-8"))
    assert replaced == 1, "the root no longer requires the archive provider as this test expects"
    versions.write_text(text, encoding="utf-8")


def test_terraform_test_plans_pass(tmp_path: Path) -> None:
    terraform = _terraform()
    if not AWS_PROVIDER.is_dir():
        pytest.skip(f"no AWS provider mirror at {PLUGIN_DIR} (set WSFLEET_TF_PLUGIN_DIR)")
    root = copy_tree(TERRAFORM, tmp_path / "terraform")
    _stand_in_package(root)
    command = [terraform, "init", "-backend=false", "-input=false", "-no-color", f"-plugin-dir={PLUGIN_DIR}"]
    init = _run(command, root, tmp_path)
    assert init.returncode == 0, init.stdout + init.stderr
    result = _run([terraform, "test", "-no-color"], root, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failed" in result.stdout and "Warning" not in result.stdout + result.stderr, result.stdout
