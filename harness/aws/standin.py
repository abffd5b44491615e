"""A local fleet dressed as a deployment, so the AWS backend's path (``wsfleet scenario --backend aws``) runs
end to end with moto standing in for AWS: no account, no cost.

``aws_standin`` starts a local topology (``harness.cluster.Cluster``, ``hardened``) whose workers run as tasks
of moto's ECS (with death notices, as terraform's EventBridge rule sends them on AWS), and puts around it what
a deployment has on AWS and a local topology lacks:

- API Gateway's IAM authorisation in front of the router (``apigw_local``): only requests SigV4-signed with
  the stand-in's credentials pass, and the server counts what it let through and refused;
- CloudWatch Logs: every process's history lines are shipped to its group every ``SHIP_EVERY_S``, as ECS's
  ``awslogs`` driver does (``LogShipper``): the workers', the router's and the simulator's;
- an ECS service for the workers' tasks (``StandIn.replace_stopped`` starts a new task for each whose process
  exited, as the service's scheduler would), and the allowlisted tag on the tables, the queue, the cluster, the
  service and its tasks (what terraform's ``chaos_target = true`` tags), a FIS role's ARN and a CloudWatch
  alarm to stop experiments on (``stop_alarm``); the FIS experiments a run starts are carried out on the
  local processes by the task supervisor (``harness.ecs_tasks``);
- the router's API (API Gateway v2, tagged) with the gateway's host as its custom domain, so the router URL
  checks out as the deployment's own;
- the file ``terraform output -json`` would write for such a deployment, plus the simulator's URLs and group.

The fleet's own processes write their history under ``RUN_DIR/fleet``; a run against the stand-in reads it
back only through the Logs API, into its own run folder.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.aws.deployment import CHAOS_TAG
from harness.aws.log_shipper import LogShipper
from harness.backends.apigw_local import Gateway, api_gateway, forward_to
from harness.backends.resources import client
from harness.cluster import Cluster, ClusterSpec
from harness.ecs_tasks import CLUSTER, TASK_FAMILY
from harness.processes import start_thread

SHIP_EVERY_S = 0.2
SERVICE = "wsfleet-workers"
ACCOUNT = "123456789012"  # moto's
STOP_ALARM = "wsfleet-stop-experiments"
ROUTER_API = "wsfleet-router"
GATEWAY_HOST = "127.0.0.1"  # the gateway's address, the router API's custom domain
GROUPS = {"worker_log_group": "/ecs/wsfleet-worker", "router_log_group": "/aws/lambda/wsfleet-router",
          "upstream_log_group": "/ecs/wsfleet-upstream"}


@dataclass
class StandIn:
    """A running stand-in: its fleet, the outputs file naming it, the variables that point an SDK at it
    (endpoints, region, credentials), and the gateway in front of its router."""

    cluster: Cluster
    outputs: Path
    env: dict[str, str]
    gateway: Gateway
    stop_alarm: str

    @property
    def account(self) -> str:
        return ACCOUNT

    def untag(self, resource: str) -> None:
        """Remove the allowlisted tag from the queue (``resource`` "queue"), the ECS service ("service"), its
        tasks ("tasks") or the router's API ("api")."""
        key = CHAOS_TAG[0]
        if resource == "tasks":
            self._tasks().adopt(SERVICE, {})
        elif resource == "api":
            apigw = client(self.env, "apigatewayv2")
            apigw.untag_resource(ResourceArn=_api_arn(self.env), TagKeys=[key])
        elif resource == "queue":
            client(self.env, "sqs").untag_queue(QueueUrl=self._backend().queue_url, TagKeys=[key])
        else:
            ecs = client(self.env, "ecs")
            ecs.untag_resource(resourceArn=_service_arn(ecs), tagKeys=[key])

    def tag(self, resource: str) -> None:
        """Put the allowlisted tag back (``untag``'s other half)."""
        if resource == "tasks":
            self._tasks().adopt(SERVICE, dict([CHAOS_TAG]))
        elif resource == "api":
            client(self.env, "apigatewayv2").tag_resource(ResourceArn=_api_arn(self.env), Tags=dict([CHAOS_TAG]))
        elif resource == "queue":
            client(self.env, "sqs").tag_queue(QueueUrl=self._backend().queue_url, Tags=dict([CHAOS_TAG]))
        else:
            ecs = client(self.env, "ecs")
            ecs.tag_resource(resourceArn=_service_arn(ecs), tags=[_ecs_tag()])

    def replace_stopped(self) -> list[str]:
        """Start a new task, under the same worker id, for every worker whose process has exited, and wait
        until each has registered: what the ECS service's scheduler does to keep its desired count (on AWS
        within a minute or so; here when asked, so that no run sees a replacement join mid-run).  The ids
        replaced."""
        gone = [worker_id for worker_id, handle in self.cluster.workers.items()
                if handle.child is None or not handle.child.running()]
        for worker_id in gone:
            self.cluster.add_worker(worker_id)
        return gone

    def _backend(self) -> Any:
        assert self.cluster.backend is not None
        return self.cluster.backend

    def _tasks(self) -> Any:
        assert self.cluster.tasks is not None
        return self.cluster.tasks


@contextmanager
def aws_standin(run_dir: Path, workers: int = 3, timescale: float = 0.1, rate: float = 5.0,
                dynamodb: str = "moto", seed: int = 0) -> Iterator[StandIn]:
    """Start the stand-in under ``run_dir`` (the fleet in ``run_dir/fleet``, the outputs in
    ``run_dir/outputs.json``); everything stops when the block ends."""
    spec = ClusterSpec(workers=workers, profile="hardened", timescale=timescale, run_dir=run_dir / "fleet",
                       dynamodb=dynamodb, rate=rate, seed=seed, death_notices=True)
    with Cluster(spec) as cluster:
        assert cluster.backend is not None and cluster.tasks is not None
        env = cluster.backend.env()
        stop_alarm = _tag_and_describe(env, cluster)
        gateway = api_gateway(forward_to(cluster.router_url),
                              {env["AWS_ACCESS_KEY_ID"]: env["AWS_SECRET_ACCESS_KEY"]})
        api_id = _router_api(env, GATEWAY_HOST)
        start_thread(threading.Thread(target=gateway.serve_forever, name="apigw", daemon=True))
        logs = client(env, "logs")
        shippers = [LogShipper(logs, GROUPS["worker_log_group"], spec.run_dir, list(cluster.workers)),
                    LogShipper(logs, GROUPS["router_log_group"], spec.run_dir, ["router"]),
                    LogShipper(logs, GROUPS["upstream_log_group"], spec.run_dir, ["upstream"])]
        done = threading.Event()

        def ship() -> None:
            while not done.wait(SHIP_EVERY_S):
                for shipper in shippers:
                    shipper.ship()

        shipping = threading.Thread(target=ship, name="log-shipper", daemon=True)
        start_thread(shipping)
        outputs = run_dir / "outputs.json"
        outputs.write_text(json.dumps(_outputs(cluster, f"http://{GATEWAY_HOST}:{gateway.server_address[1]}",
                                               api_id), indent=2) + "\n")
        try:
            yield StandIn(cluster, outputs, env, gateway, stop_alarm)
        finally:
            done.set()
            shipping.join(timeout=5.0)
            gateway.shutdown()
            gateway.server_close()


def _ecs_tag() -> dict[str, str]:
    return {"key": CHAOS_TAG[0], "value": CHAOS_TAG[1]}


def _api_arn(env: dict[str, str]) -> str:
    apigw = client(env, "apigatewayv2")
    [api] = [item for item in apigw.get_apis()["Items"] if item["Name"] == ROUTER_API]
    return f"arn:aws:apigateway:{env['AWS_REGION']}::/apis/{api['ApiId']}"


def _router_api(env: dict[str, str], host: str) -> str:
    """The router's API, tagged, and ``host`` as its custom domain (where the gateway listens); its id."""
    apigw = client(env, "apigatewayv2")
    api_id = str(apigw.create_api(Name=ROUTER_API, ProtocolType="HTTP", Tags=dict([CHAOS_TAG]))["ApiId"])
    apigw.create_stage(ApiId=api_id, StageName="$default")
    certificate = f"arn:aws:acm:{env['AWS_REGION']}:{ACCOUNT}:certificate/standin"
    apigw.create_domain_name(DomainName=host, DomainNameConfigurations=[
        {"CertificateArn": certificate, "EndpointType": "REGIONAL"}])
    apigw.create_api_mapping(ApiId=api_id, DomainName=host, Stage="$default")
    return api_id


def _service_arn(ecs: Any) -> str:
    return str(ecs.describe_services(cluster=CLUSTER, services=[SERVICE])["services"][0]["serviceArn"])


def _tag_and_describe(env: dict[str, str], cluster: Cluster) -> str:
    """What terraform creates beyond a local topology: the service, the log groups, the allowlisted tags, an
    alarm (its ARN)."""
    assert cluster.backend is not None and cluster.tasks is not None
    ecs, dynamodb = client(env, "ecs"), client(env, "dynamodb")
    ecs.create_service(cluster=CLUSTER, serviceName=SERVICE, taskDefinition=TASK_FAMILY, desiredCount=0,
                       tags=[_ecs_tag()])
    ecs.tag_resource(resourceArn=cluster.tasks.cluster_arn, tags=[_ecs_tag()])
    cluster.tasks.adopt(SERVICE, dict([CHAOS_TAG]))  # propagateTags=SERVICE
    for table in cluster.backend.tables.values():
        arn = dynamodb.describe_table(TableName=table)["Table"]["TableArn"]
        dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": CHAOS_TAG[0], "Value": CHAOS_TAG[1]}])
    client(env, "sqs").tag_queue(QueueUrl=cluster.backend.queue_url, Tags=dict([CHAOS_TAG]))
    logs = client(env, "logs")
    for group in GROUPS.values():
        logs.create_log_group(logGroupName=group)
    cloudwatch = client(env, "cloudwatch")
    cloudwatch.put_metric_alarm(AlarmName=STOP_ALARM, Namespace="wsfleet", MetricName="Errors", Statistic="Sum",
                                Period=60, EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanThreshold")
    return str(cloudwatch.describe_alarms(AlarmNames=[STOP_ALARM])["MetricAlarms"][0]["AlarmArn"])


def _outputs(cluster: Cluster, router_url: str, router_api_id: str) -> dict[str, Any]:
    """``terraform output -json`` for the stand-in (each output ``{"value": ...}``)."""
    assert cluster.backend is not None
    values: dict[str, Any] = {
        "region": cluster.backend.region, "router_url": router_url, "router_api_id": router_api_id,
        "connections_table": cluster.backend.tables["connections"],
        "messages_table": cluster.backend.tables["messages"], "workers_table": cluster.backend.tables["workers"],
        "queue_url": cluster.backend.queue_url, "cluster": CLUSTER, "service": SERVICE,
        "fleet_environment": {k: v for k, v in cluster.config.to_env().items() if k != "WSFLEET_WORKER_ID"},
        "fis_role_arn": f"arn:aws:iam::{ACCOUNT}:role/wsfleet-fis",
        "upstream_url": cluster.upstream_url, "upstream_control_url": cluster.upstream_control_url, **GROUPS,
    }
    return {name: {"value": value} for name, value in values.items()}
