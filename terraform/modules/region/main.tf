# One region's share of the deployment: the notification queue, the router (Lambda + HTTP API), the
# worker service, its autoscaling and its alarms.  The tables are global (modules/tables, with replicas);
# every other resource exists once per region, so the root instantiates this module for the primary
# region and, when a standby region is set, again with the standby provider.

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

data "aws_region" "current" {
  lifecycle {
    precondition {
      condition     = length(setsubtract(keys(var.fleet_settings), keys(local.fleet_settable))) == 0
      error_message = "fleet_settings may only set ${join(", ", sort(keys(local.fleet_settable)))}; not ${join(", ", setsubtract(keys(var.fleet_settings), keys(local.fleet_settable)))}."
    }
  }
}

locals {
  region                = data.aws_region.current.name
  table_arn_prefix      = "arn:${data.aws_partition.current.partition}:dynamodb:${local.region}:${data.aws_caller_identity.current.account_id}:table"
  connections_table_arn = "${local.table_arn_prefix}/${var.connections_table_name}"
  messages_table_arn    = "${local.table_arn_prefix}/${var.messages_table_name}"
  workers_table_arn     = "${local.table_arn_prefix}/${var.workers_table_name}"
  state_index_arn       = "${local.table_arn_prefix}/${var.connections_table_name}/index/${var.state_index_name}"
  # The namespace fleet/store.py publishes ActiveConnections to.
  metric_namespace = "wsfleet"
  # Worker egress: 443 (AWS APIs, wss://), every port an allowlist entry names (host:port, [v6]:port),
  # and the operator's additions; a bare ws:// host on port 80 needs 80 in worker_egress_ports.
  worker_egress_ports = distinct(concat([443], var.worker_egress_ports,
  [for entry in var.allowed_ws_hosts : tonumber(one(regex(":([0-9]+)$", entry))) if can(regex(":([0-9]+)$", entry))]))

  # Every variable of fleet/config.py's ENV_VARS appears in one of these two maps (tests/deploy checks the
  # names against it).  The deployment sets the first; fleet_settings may set any of the second, whose
  # empty values leave FleetConfig's defaults: the published durations and limits, and a worker id of
  # <hostname>-<pid>, unique per task.
  fleet_deployment = {
    WSFLEET_PROFILE           = var.profile
    WSFLEET_REGION            = local.region
    WSFLEET_CONNECTIONS_TABLE = var.connections_table_name
    WSFLEET_MESSAGES_TABLE    = var.messages_table_name
    WSFLEET_WORKERS_TABLE     = var.workers_table_name
    WSFLEET_QUEUE_URL         = module.queue.queue_url
    WSFLEET_ALLOWED_WS_HOSTS  = join(",", var.allowed_ws_hosts)
    # The region activation gate (region_gate.tf): the ARC cluster and this region's routing control.
    WSFLEET_REGION_GATE_ENDPOINTS = var.region_gate_endpoints
    WSFLEET_REGION_GATE_CONTROL   = var.region_gate_control_arn
    # with a standby (a gate), the router journals every START and STOP (fleet/router.py)
    WSFLEET_CONTROL_JOURNAL = var.region_gate_control_arn == "" ? "off" : "on"
  }
  fleet_settable = {
    WSFLEET_TIMESCALE          = ""
    WSFLEET_WORKER_ID          = ""
    WSFLEET_LEASE_MS           = ""
    WSFLEET_HEARTBEAT_MS       = ""
    WSFLEET_RECONCILE_MS       = ""
    WSFLEET_DESIRED_CHECK_MS   = ""
    WSFLEET_NOTIFY_WAIT_MS     = ""
    WSFLEET_SHUTDOWN_BUDGET_MS = ""
    WSFLEET_METRIC_INTERVAL_MS = ""
    WSFLEET_MAX_CONNECTIONS    = ""
    WSFLEET_CLAIMS_IN_FLIGHT   = ""
    WSFLEET_NOTIFY_POLLERS     = ""
    WSFLEET_HANDSHAKE_RATE     = ""
    WSFLEET_BALANCE_BAND       = ""
    WSFLEET_CLOCK_TOLERANCE_MS = ""
    WSFLEET_FENCE_MARGIN_MS    = ""
    WSFLEET_CHECKPOINT_MS      = ""
    WSFLEET_FLUSH_MS           = ""
    WSFLEET_UPSTREAM_BUDGET_MS = ""
    WSFLEET_RECONNECT_BASE_MS  = ""
    WSFLEET_RECONNECT_MAX_MS   = ""
    WSFLEET_RECONNECT_POLICY   = ""
    WSFLEET_AWS_TIMEOUT_MS     = ""
    WSFLEET_UPSTREAM_VIA       = ""
    WSFLEET_HISTORY_PATH       = ""
    WSFLEET_CLOCK_OFFSET_FILE  = ""
    WSFLEET_CLOCK_OFFSET_MS    = ""
    # Read from the task metadata endpoint (death notices name the task).
    WSFLEET_TASK_ARN = ""
  }
  fleet_environment = merge(local.fleet_settable, var.fleet_settings, local.fleet_deployment)
}

module "queue" {
  source                 = "../queue"
  queue_name             = var.queue_name
  dead_letter_queue_name = var.dead_letter_queue_name
  kms_key_arn            = var.kms_key_arn
}

module "router" {
  source                  = "../router"
  name                    = var.name
  package_path            = var.package_path
  package_hash            = var.package_hash
  dependencies_layer_path = var.dependencies_layer_path
  dependencies_layer_hash = var.dependencies_layer_hash
  fleet_environment       = local.fleet_environment
  connections_table_arn   = local.connections_table_arn
  workers_table_arn       = local.workers_table_arn
  queue_arn               = module.queue.queue_arn
  events_authorization    = var.events_authorization
  health_check_path       = var.health_check_path
  domain_name             = var.domain_name
  certificate_arn         = var.certificate_arn
  hosted_zone_id          = var.hosted_zone_id
  log_retention_days      = var.log_retention_days
  region_gate             = var.region_gate
  region_gate_control_arn = var.region_gate_control_arn
  kms_key_arn             = var.kms_key_arn
  queue_key_policy        = module.queue.key_policy_json
}

module "workers" {
  source                = "../workers"
  name                  = var.name
  image                 = var.worker_image
  fleet_environment     = local.fleet_environment
  connections_table_arn = local.connections_table_arn
  messages_table_arn    = local.messages_table_arn
  workers_table_arn     = local.workers_table_arn
  index_arns            = [local.state_index_arn]
  queue_arn             = module.queue.queue_arn
  metric_namespace      = local.metric_namespace
  vpc_id                = var.vpc_id
  subnet_ids            = var.subnet_ids
  assign_public_ip      = var.assign_public_ip
  cpu                   = var.worker_cpu
  memory_mb             = var.worker_memory_mb
  desired_count         = var.min_tasks
  stop_timeout_s        = var.stop_timeout_s
  fault_injection       = var.fault_injection
  log_retention_days    = var.log_retention_days

  region_gate             = var.region_gate
  region_gate_control_arn = var.region_gate_control_arn
  egress_ports            = local.worker_egress_ports
  egress_cidr_blocks      = var.worker_egress_cidr_blocks
  kms_key_arn             = var.kms_key_arn
  queue_key_policy        = module.queue.key_policy_json
}

module "autoscaling" {
  source                      = "../autoscaling"
  cluster_name                = module.workers.cluster_name
  service_name                = module.workers.service_name
  min_tasks                   = var.min_tasks
  max_tasks                   = var.max_tasks
  metric_namespace            = local.metric_namespace
  target_connections_per_task = var.target_connections_per_task
  scale_out_cooldown_s        = var.scale_out_cooldown_s
  scale_in_cooldown_s         = var.scale_in_cooldown_s
}

module "alarms" {
  source                 = "../alarms"
  name                   = var.name
  worker_log_group_name  = module.workers.log_group_name
  metric_namespace       = local.metric_namespace
  dead_letter_queue_name = var.dead_letter_queue_name
  alarm_actions          = var.alarm_actions
}

# Death notices: ECS reports a worker task's container STOPPED (its process has exited; Fargate then
# deprovisions the task, often for tens of seconds, before the task itself is STOPPED, another event).
# EventBridge puts each such event on the workers' queue, where a worker confirms it with DescribeTasks and
# takes that task's streams at once instead of at lease expiry (fleet/deathnotice.py).  The queue accepts
# these events from this rule only.  The rule has fleet.schema.DEATH_NOTICE_COPIES targets, all the queue, so
# each event arrives that many times: the dead worker's own last long poll may take one copy, which stays
# invisible for a while, and another reaches a live worker at once.
resource "aws_cloudwatch_event_rule" "worker_stopped" {
  name        = "${var.name}-worker-stopped"
  description = "wsfleet: a worker task stopped; its streams can be taken at once"
  event_pattern = jsonencode({
    source        = ["aws.ecs"]
    "detail-type" = ["ECS Task State Change"]
    detail = {
      clusterArn = ["arn:${data.aws_partition.current.partition}:ecs:${local.region}:${data.aws_caller_identity.current.account_id}:cluster/${module.workers.cluster_name}"]
      "$or" = [
        { lastStatus = ["STOPPED"] },
        { containers = { lastStatus = ["STOPPED"] } },
      ]
    }
  })
}

resource "aws_cloudwatch_event_target" "worker_stopped" {
  count     = 2
  rule      = aws_cloudwatch_event_rule.worker_stopped.name
  target_id = "death-notice-${count.index}"
  arn       = module.queue.queue_arn
}

data "aws_iam_policy_document" "queue_death_notices" {
  statement {
    sid       = "DeathNotices"
    actions   = ["sqs:SendMessage"]
    resources = [module.queue.queue_arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.worker_stopped.arn]
    }
  }
}

resource "aws_sqs_queue_policy" "death_notices" {
  queue_url = module.queue.queue_url
  policy    = data.aws_iam_policy_document.queue_death_notices.json
}
