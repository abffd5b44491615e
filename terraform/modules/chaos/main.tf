# What a chaos run against the deployment needs in IAM (created only with chaos_target = true):
#   - the role AWS Fault Injection Service assumes for the experiments `wsfleet aws-plan` writes: AWS's
#     managed policy for the aws:ecs:* actions (ECS StopTask, and the task actions' SSM commands);
#   - the policy of whoever runs the harness: exactly the calls its AWS backend makes (harness/backends/
#     aws.py, aws_logs.py, aws_topology.py, harness/cli_aws.py, the scenario phases and ground truth it runs,
#     and the signed router calls of harness/router_client.py), each on this deployment's resources only:
#     StopTask only on this cluster's tasks carrying the chaos tag (the service propagates its tags).
#     tests/deploy derives those calls with `ast` and compares.  sts:GetCallerIdentity needs no permission.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  prefix     = "arn:${data.aws_partition.current.partition}"
  region     = data.aws_region.current.name
  account    = data.aws_caller_identity.current.account_id
  queue_name = element(split("/", var.queue_url), length(split("/", var.queue_url)) - 1)
}

data "aws_iam_policy_document" "fis_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["fis.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "fis" {
  name_prefix        = "${var.name}-fis-"
  assume_role_policy = data.aws_iam_policy_document.fis_assume.json
}

resource "aws_iam_role_policy_attachment" "fis_ecs" {
  role       = aws_iam_role.fis.name
  policy_arn = "${local.prefix}:iam::aws:policy/service-role/AWSFaultInjectionSimulatorECSAccess"
}

data "aws_iam_policy_document" "harness" {
  statement {
    sid       = "PreflightTables"
    actions   = ["dynamodb:DescribeTable", "dynamodb:ListTagsOfResource"]
    resources = [for table in var.table_names : "${local.prefix}:dynamodb:${local.region}:${local.account}:table/${table}"]
  }
  statement {
    sid       = "RunReadTables"
    actions   = ["dynamodb:Scan", "dynamodb:Query"]
    resources = [for table in var.table_names : "${local.prefix}:dynamodb:${local.region}:${local.account}:table/${table}"]
  }
  statement {
    sid       = "RunListTasks"
    actions   = ["ecs:ListTasks"]
    resources = ["*"]
    condition {
      test     = "ArnEquals"
      variable = "ecs:cluster"
      values   = ["${local.prefix}:ecs:${local.region}:${local.account}:cluster/${var.cluster}"]
    }
  }
  statement {
    sid       = "RunStopTask"
    actions   = ["ecs:StopTask"]
    resources = ["${local.prefix}:ecs:${local.region}:${local.account}:task/${var.cluster}/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/wsfleet:chaos"
      values   = ["allowed"]
    }
  }
  statement {
    sid     = "RunKillExperiment"
    actions = ["fis:CreateExperimentTemplate", "fis:TagResource", "fis:StartExperiment", "fis:GetExperiment", "fis:DeleteExperimentTemplate"]
    resources = [
      "${local.prefix}:fis:${local.region}:${local.account}:action/aws:ecs:task-kill-process",
      "${local.prefix}:fis:${local.region}:${local.account}:experiment-template/*",
      "${local.prefix}:fis:${local.region}:${local.account}:experiment/*",
    ]
  }
  statement {
    sid       = "RunPassFisRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.fis.arn]
  }
  statement {
    sid       = "PreflightQueue"
    actions   = ["sqs:ListQueueTags"]
    resources = ["${local.prefix}:sqs:${local.region}:${local.account}:${local.queue_name}"]
  }
  statement {
    sid       = "PreflightCluster"
    actions   = ["ecs:DescribeClusters"]
    resources = ["${local.prefix}:ecs:${local.region}:${local.account}:cluster/${var.cluster}"]
  }
  statement {
    sid       = "PreflightService"
    actions   = ["ecs:DescribeServices"]
    resources = ["${local.prefix}:ecs:${local.region}:${local.account}:service/${var.cluster}/${var.service}"]
  }
  statement {
    sid     = "PreflightRouter"
    actions = ["apigateway:GET"]
    resources = [
      "${local.prefix}:apigateway:${local.region}::/apis/${var.router_api_id}",
      "${local.prefix}:apigateway:${local.region}::/domainnames/*/apimappings",
    ]
  }
  statement {
    sid       = "History"
    actions   = ["logs:FilterLogEvents"]
    resources = [for group in var.log_groups : "${local.prefix}:logs:${local.region}:${local.account}:log-group:${group}:*"]
  }
  statement {
    sid       = "Router"
    actions   = ["execute-api:Invoke"]
    resources = [var.router_route_arn]
  }
}

resource "aws_iam_policy" "harness" {
  name_prefix = "${var.name}-harness-"
  description = "What wsfleet's harness calls on this deployment (aws-preflight, aws-history, start/stop)."
  policy      = data.aws_iam_policy_document.harness.json
}
