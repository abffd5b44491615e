# syntax=docker/dockerfile:1
# The wsfleet worker image: `python -m fleet.worker`, configured by WSFLEET_* variables (fleet/config.py).
#
# Signals: tini is PID 1 and forwards SIGTERM to the worker, which releases its leases and exits 0
# (ECS sends SIGTERM, then SIGKILL after the task definition's stopTimeout).  Python as PID 1 would
# ignore SIGTERM until its handler is installed, since the kernel applies no default action to PID 1.
# Health: `wsfleet-healthcheck` fails when the worker process is gone, stopped (SIGSTOP, a frozen
# process) or a zombie; ECS runs the same command from the task definition.
#
# Supply chain: the base image is pinned by digest (python:3.11.13-slim-bookworm, the multi-arch index),
# and every Python package, transitive ones included, comes from worker-requirements.txt with its hashes
# (`--require-hashes`, wheels only: nothing is built).  The fleet package is copied, not `pip install`ed:
# the image holds the worker and nothing of the harness (no `wsfleet` CLI to fail on a missing module).
# Regenerate the lock after changing [project].dependencies in pyproject.toml, in a throwaway venv:
#   pip install pip-tools && pip-compile --allow-unsafe --generate-hashes --no-emit-find-links \
#     --no-emit-index-url --output-file=worker-requirements.txt --strip-extras pyproject.toml
# The root filesystem is read-only at run time (terraform's task definition); the worker writes nothing
# but stdout, and /tmp is a task volume for libraries that want a temporary file.
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/opt/wsfleet \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

COPY worker-requirements.txt /tmp/worker-requirements.txt
RUN pip install --require-hashes --only-binary=:all: --no-deps -r /tmp/worker-requirements.txt \
    && rm /tmp/worker-requirements.txt
COPY fleet /opt/wsfleet/fleet
RUN python -m compileall -q /opt/wsfleet/fleet

COPY --chmod=0755 <<'EOF' /usr/local/bin/wsfleet-healthcheck
#!/usr/local/bin/python
"""Exit 0 while the worker (a `python -m MODULE` process; MODULE defaults to fleet.worker) exists and is
running or sleeping; exit 1, saying why, when there is none or it is stopped (SIGSTOP), traced, a zombie
or dead.  tini's own command line also names the module, but not as `-m MODULE` right after argv[0]."""
import os
import sys

module = (sys.argv[1] if len(sys.argv) > 1 else "fleet.worker").encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if cmdline.read().split(b"\0")[1:3] != [b"-m", module]:
                continue
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read()
    except OSError:
        continue
    state = fields[fields.rindex(b")") + 2 :].split()[0].decode()
    if state in ("T", "t", "Z", "X", "x"):
        print(f"python -m {module.decode()} (pid {pid}) is in state {state}")
        sys.exit(1)
    sys.exit(0)
print(f"no python -m {module.decode()} process")
sys.exit(1)
EOF

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/wsfleet \
    --shell /usr/sbin/nologin wsfleet
USER 10001:10001
WORKDIR /home/wsfleet

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["wsfleet-healthcheck"]

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "fleet.worker"]
