# The workers in one region: an ECS cluster and a Fargate service running `python -m fleet.worker` from
# the repository's image, with its logs in CloudWatch Logs, a task role that grants exactly the DynamoDB,
# SQS, CloudWatch and ECS operations the worker's code calls (tests/deploy derives them from fleet/ with `ast`),
# and an execution role that may only pull the image and write the log group.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition      = data.aws_partition.current.partition
  region         = data.aws_region.current.name
  account_id     = data.aws_caller_identity.current.account_id
  container_name = "worker"
  cluster_name   = "${var.name}-fleet"
  # The one writable path of the read-only container: a task volume (Fargate ephemeral storage) at /tmp.
  scratch_volume = "tmp"
  log_group_name = "/ecs/${var.name}-worker"
  # <account>.dkr.ecr.<region>.amazonaws.com/<repository>[:tag|@digest]: pull rights on that repository only.
  ecr_image      = regex("^(?:(\\d{12})\\.dkr\\.ecr\\.([a-z0-9-]+)\\.amazonaws\\.com(?:\\.cn)?/([^:@]+))?", var.image)
  ecr_repository = local.ecr_image[0] == null ? null : "arn:${local.partition}:ecr:${local.ecr_image[1]}:${local.ecr_image[0]}:repository/${local.ecr_image[2]}"
  environment = [
    for name in sort(keys(var.fleet_environment)) : { name = name, value = var.fleet_environment[name] }
    if var.fleet_environment[name] != ""
  ]
  container = {
    name        = local.container_name
    image       = var.image
    essential   = true
    environment = local.environment
    # SIGTERM first (tini in the image forwards it to the worker), SIGKILL this many seconds later.
    stopTimeout = var.stop_timeout_s
    # One socket per upstream connection plus the AWS clients' pools.
    ulimits = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    # The worker writes only to stdout (awslogs); nothing in the image can be changed at run time.
    readonlyRootFilesystem = true
    mountPoints            = [{ sourceVolume = local.scratch_volume, containerPath = "/tmp", readOnly = false }]
    # The image's HEALTHCHECK script (ECS ignores the Dockerfile's HEALTHCHECK instruction).
    healthCheck = {
      command     = ["CMD", "wsfleet-healthcheck"]
      interval    = 30
      timeout     = 5
      retries     = 3
      startPeriod = 30
    }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = local.log_group_name
        awslogs-region        = local.region
        awslogs-stream-prefix = local.container_name
        mode                  = "non-blocking"
        max-buffer-size       = "4m"
      }
    }
  }
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:*"]
    }
  }
}

# What the worker's code calls (fleet/worker.py and everything it imports), per table: conditional puts
# and updates (LeaseStore.execute, given each table) and consistent reads of connections and workers;
# the fenced message log (a conditional put per batch or takeover mark, the tail query, and a consistent
# read of one log item after a refused put); the workers-table scan
# (hardened); the reconcile query over the state index (the only grant on the index); notifications
# (receive, batch delete, and a send on hand-off); the ActiveConnections metric.  SQS authorises
# DeleteMessageBatch as sqs:DeleteMessage.  tests/deploy fails when this and the code disagree.
data "aws_iam_policy_document" "task_fleet" {
  statement {
    sid       = "Connections"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
    resources = [var.connections_table_arn]
  }

  statement {
    sid       = "Messages"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"]
    resources = [var.messages_table_arn]
  }

  statement {
    sid       = "Workers"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Scan", "dynamodb:UpdateItem"]
    resources = [var.workers_table_arn]
  }

  statement {
    sid       = "StateIndex"
    actions   = ["dynamodb:Query"]
    resources = var.index_arns
  }

  statement {
    sid       = "Notifications"
    actions   = ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:ReceiveMessage", "sqs:SendMessage"]
    resources = [var.queue_arn]
  }

  # A death notice is believed only once ECS itself says the task stopped (fleet/deathnotice.py).
  statement {
    sid       = "DeathNotices"
    actions   = ["ecs:DescribeTasks"]
    resources = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:task/${local.cluster_name}/*"]
  }

  statement {
    sid       = "Metrics"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metric_namespace]
    }
  }
}

data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.worker.arn}:*"]
  }

  dynamic "statement" {
    for_each = local.ecr_repository == null ? [] : [local.ecr_repository]
    content {
      sid       = "PullImage"
      actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.ecr_repository == null ? [] : [local.ecr_repository]
    content {
      sid       = "EcrToken"
      actions   = ["ecr:GetAuthorizationToken"]
      resources = ["*"]
    }
  }
}

resource "aws_iam_role" "task" {
  name_prefix        = substr("${var.name}-worker-task-", 0, 38)
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy" "task_fleet" {
  name   = "fleet"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task_fleet.json
}

resource "aws_iam_role" "execution" {
  name_prefix        = substr("${var.name}-worker-exec-", 0, 38)
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy" "execution" {
  name   = "pull-and-log"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

resource "aws_cloudwatch_log_group" "worker" {
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn == "" ? null : var.kms_key_arn
}

resource "aws_ecs_cluster" "fleet" {
  name = local.cluster_name

  setting {
    name  = "containerInsights"
    value = var.container_insights ? "enabled" : "disabled"
  }
}

resource "aws_ecs_task_definition" "worker" {
  family                   = "${var.name}-worker"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory_mb
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn
  # FIS's aws:ecs:task-network-* actions reach a Fargate task through the ECS agent's fault endpoints
  enable_fault_injection = var.fault_injection

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  container_definitions = jsonencode([local.container])

  volume {
    name = local.scratch_volume
  }

  # The log group must exist before a task can write to it.
  depends_on = [aws_cloudwatch_log_group.worker]
}

resource "aws_security_group" "worker" {
  name_prefix = "${var.name}-worker-"
  description = "wsfleet workers: outbound only, TCP to the listed ports"
  vpc_id      = var.vpc_id

  # TCP only, to 443 (AWS APIs, wss:// upstreams) and the upstream ports; the VPC's DNS resolver and the
  # task metadata and credentials endpoints are not subject to security groups.
  dynamic "egress" {
    for_each = toset(var.egress_ports)
    content {
      description = "TCP ${egress.value}: AWS APIs and upstream WebSocket hosts"
      from_port   = egress.value
      to_port     = egress.value
      protocol    = "tcp"
      cidr_blocks = var.egress_cidr_blocks
    }
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_ecs_service" "worker" {
  name             = "${var.name}-worker"
  cluster          = aws_ecs_cluster.fleet.id
  task_definition  = aws_ecs_task_definition.worker.arn
  desired_count    = var.desired_count
  launch_type      = "FARGATE"
  platform_version = "LATEST"
  propagate_tags   = "SERVICE"

  # Start new tasks before stopping old ones: leases move to them as the old tasks release on SIGTERM.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.worker.id]
    assign_public_ip = var.assign_public_ip
  }

  lifecycle {
    # modules/autoscaling owns the task count.
    ignore_changes = [desired_count]
  }
}

# With a customer-managed key (kms_key_arn): what using the queue's key takes (modules/queue).
resource "aws_iam_role_policy" "task_kms" {
  count  = var.kms_key_arn == "" ? 0 : 1
  name   = "queue-key"
  role   = aws_iam_role.task.id
  policy = var.queue_key_policy
}
