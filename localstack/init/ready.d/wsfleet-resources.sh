#!/bin/sh
# LocalStack READY hook: create wsfleet's tables and queues from fleet/schema.py, in the default region
# and, when WSFLEET_STANDBY_REGION is set, in that region too.  The repository is mounted at
# $WSFLEET_REPO (docker-compose.yml); table names follow WSFLEET_* variables like every fleet process.
set -eu

repo="${WSFLEET_REPO:-/opt/wsfleet}"
# LocalStack's own interpreter has boto3; any Python with boto3 will do.
python="${WSFLEET_PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x /opt/code/localstack/.venv/bin/python ]; then
        python=/opt/code/localstack/.venv/bin/python
    else
        python=python3
    fi
fi

set -- --endpoint "${WSFLEET_LOCALSTACK_ENDPOINT:-http://localhost:4566}" --region "${AWS_DEFAULT_REGION:-us-east-1}"
if [ -n "${WSFLEET_STANDBY_REGION:-}" ]; then
    set -- "$@" --region "$WSFLEET_STANDBY_REGION"
fi

cd "$repo"
export PYTHONDONTWRITEBYTECODE=1
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m harness.backends.localstack "$@"
