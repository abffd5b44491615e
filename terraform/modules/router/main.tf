# The router in one region: the Lambda (fleet.router.handler) behind an HTTP API, its least-privilege
# role, and, when a custom domain is given, the API's two custom domains in this region: domain_name (the
# failover records point at its regional target) and <region>.<domain_name> (with an alias record of its
# own: this region's own address, which its Route 53 health check probes and the harness can reach).  With
# a custom domain the API's default execute-api endpoint is disabled, so every call goes through a name
# the certificate covers.
#
# The role's fleet statements grant exactly the DynamoDB operations the router's code calls, per table, and
# the one SQS operation (tests/deploy derives both from fleet/ with `ast` and compares).

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  function_name = "${var.name}-router"
  log_group_arn = "arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:log-group:/aws/lambda/${local.function_name}"
  custom_domain = var.domain_name != ""
  # The failover name and this region's own name, each an API custom domain mapped to the $default stage.
  custom_domains = local.custom_domain ? {
    failover = var.domain_name
    regional = "${data.aws_region.current.name}.${var.domain_name}"
  } : {}
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

# What fleet/router.py calls: START (put_item / update_item) and STOP (update_item) on the connections
# table, with a standby its control journal (put_item) and, when its region is activated, the journal's
# re-application (scan), the hardened STOP mailbox (update_item) on the workers table, then the notification
# (send_message).  Nothing on the messages table.
data "aws_iam_policy_document" "router_fleet" {
  statement {
    sid       = "Connections"
    actions   = ["dynamodb:PutItem", "dynamodb:Scan", "dynamodb:UpdateItem"]
    resources = [var.connections_table_arn]
  }

  statement {
    sid       = "StopMailbox"
    actions   = ["dynamodb:UpdateItem"]
    resources = [var.workers_table_arn]
  }

  statement {
    sid       = "Notify"
    actions   = ["sqs:SendMessage"]
    resources = [var.queue_arn]
  }
}

data "aws_iam_policy_document" "router_logs" {
  statement {
    sid       = "OwnLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${local.log_group_arn}:*"]
  }
}

resource "aws_iam_role" "router" {
  name_prefix        = substr("${var.name}-router-", 0, 38)
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy" "router_fleet" {
  name   = "fleet"
  role   = aws_iam_role.router.id
  policy = data.aws_iam_policy_document.router_fleet.json
}

resource "aws_iam_role_policy" "router_logs" {
  name   = "logs"
  role   = aws_iam_role.router.id
  policy = data.aws_iam_policy_document.router_logs.json
}

resource "aws_cloudwatch_log_group" "router" {
  name              = "/aws/lambda/${local.function_name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn == "" ? null : var.kms_key_arn
}

resource "aws_lambda_layer_version" "dependencies" {
  layer_name          = "${var.name}-router-dependencies"
  filename            = var.dependencies_layer_path
  source_code_hash    = var.dependencies_layer_hash
  compatible_runtimes = ["python3.11"]
}

resource "aws_lambda_function" "router" {
  function_name    = local.function_name
  role             = aws_iam_role.router.arn
  runtime          = "python3.11"
  handler          = "fleet.router.handler"
  filename         = var.package_path
  source_code_hash = var.package_hash
  layers           = [aws_lambda_layer_version.dependencies.arn]
  timeout          = var.lambda_timeout_s
  memory_size      = var.lambda_memory_mb

  # Empty values are left out, as in the task definition: FleetConfig reads unset and empty alike.
  environment {
    variables = { for name, value in var.fleet_environment : name => value if value != "" }
  }

  depends_on = [aws_cloudwatch_log_group.router, aws_iam_role_policy.router_logs]
}

resource "aws_apigatewayv2_api" "router" {
  name          = "${var.name}-router"
  protocol_type = "HTTP"
  description   = "wsfleet router: POST /events takes START and STOP events."

  disable_execute_api_endpoint = local.custom_domain
}

resource "aws_apigatewayv2_integration" "router" {
  api_id                 = aws_apigatewayv2_api.router.id
  integration_type       = "AWS_PROXY"
  integration_uri        = aws_lambda_function.router.invoke_arn
  payload_format_version = "2.0"
  timeout_milliseconds   = min(30000, var.lambda_timeout_s * 1000 + 1000)
}

resource "aws_apigatewayv2_route" "events" {
  api_id             = aws_apigatewayv2_api.router.id
  route_key          = "POST /events"
  target             = "integrations/${aws_apigatewayv2_integration.router.id}"
  authorization_type = var.events_authorization
}

resource "aws_apigatewayv2_route" "health" {
  api_id             = aws_apigatewayv2_api.router.id
  route_key          = "GET ${var.health_check_path}"
  target             = "integrations/${aws_apigatewayv2_integration.router.id}"
  authorization_type = "NONE"
}

resource "aws_cloudwatch_log_group" "api" {
  name              = "/aws/apigateway/${var.name}-router"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn == "" ? null : var.kms_key_arn
}

resource "aws_apigatewayv2_stage" "default" {
  api_id      = aws_apigatewayv2_api.router.id
  name        = "$default"
  auto_deploy = true

  default_route_settings {
    throttling_rate_limit  = var.throttling_rate_limit
    throttling_burst_limit = var.throttling_burst_limit
  }

  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api.arn
    format = jsonencode({
      requestId = "$context.requestId"
      route     = "$context.routeKey"
      status    = "$context.status"
      latencyMs = "$context.responseLatency"
      error     = "$context.integrationErrorMessage"
    })
  }
}

resource "aws_lambda_permission" "api" {
  statement_id  = "AllowRouterApi"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.router.function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.router.execution_arn}/*/*"
}

resource "aws_apigatewayv2_domain_name" "router" {
  for_each    = local.custom_domains
  domain_name = each.value

  domain_name_configuration {
    certificate_arn = var.certificate_arn
    endpoint_type   = "REGIONAL"
    security_policy = "TLS_1_2"
  }

  lifecycle {
    precondition {
      condition     = var.certificate_arn != "" && var.hosted_zone_id != ""
      error_message = "certificate_arn (an ACM certificate in this region covering domain_name and <region>.<domain_name>) and hosted_zone_id are required when domain_name is set."
    }
  }
}

resource "aws_apigatewayv2_api_mapping" "router" {
  for_each    = aws_apigatewayv2_domain_name.router
  api_id      = aws_apigatewayv2_api.router.id
  domain_name = each.value.id
  stage       = aws_apigatewayv2_stage.default.id
}

# This region's own name: an alias to its regional custom domain (the failover name's records are
# modules/failover's).
resource "aws_route53_record" "regional" {
  count   = local.custom_domain ? 1 : 0
  zone_id = var.hosted_zone_id
  name    = aws_apigatewayv2_domain_name.router["regional"].domain_name
  type    = "A"

  alias {
    name                   = aws_apigatewayv2_domain_name.router["regional"].domain_name_configuration[0].target_domain_name
    zone_id                = aws_apigatewayv2_domain_name.router["regional"].domain_name_configuration[0].hosted_zone_id
    evaluate_target_health = false
  }
}

# With a customer-managed key (kms_key_arn): what using the queue's key takes (modules/queue).
resource "aws_iam_role_policy" "router_kms" {
  count  = var.kms_key_arn == "" ? 0 : 1
  name   = "queue-key"
  role   = aws_iam_role.router.id
  policy = var.queue_key_policy
}
