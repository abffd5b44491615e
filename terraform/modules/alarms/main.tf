# The fleet's alarms in one region.  Two metrics come from metric filters on the workers' JSON log lines
# (fleet/worker.py `log(event, **fields)`: {"t": ..., "event": ..., ...}); tests/deploy checks that every
# event and field a filter reads is one the fleet's code logs.
#
# * LeaseAcquireFailures: one per `lease.acquire` line with outcome "fail" (a refused conditional write).
# * StalledConnections: from each `reconcile` line, the number of STARTED connections it found with an
#   expired lease (claimable: nobody is consuming them).  A recovering crash shows them for up to about
#   lease + reconcile; only when every reconcile over `stalled_minutes` still finds some do they count as
#   stalled (the Minimum statistic over each 5-minute period stays above zero).
# * No worker reporting ActiveConnections at all (the whole fleet down), and dead letters.

locals {
  period_s        = 300
  stalled_periods = max(1, ceil(var.stalled_minutes * 60 / local.period_s))
}

resource "aws_cloudwatch_log_metric_filter" "lease_acquire_failures" {
  name           = "${var.name}-lease-acquire-failures"
  log_group_name = var.worker_log_group_name
  pattern        = "{ ($.event = \"lease.acquire\") && ($.outcome = \"fail\") }"

  metric_transformation {
    name          = "LeaseAcquireFailures"
    namespace     = var.metric_namespace
    value         = "1"
    default_value = "0"
    unit          = "Count"
  }
}

resource "aws_cloudwatch_log_metric_filter" "stalled_connections" {
  name           = "${var.name}-stalled-connections"
  log_group_name = var.worker_log_group_name
  pattern        = "{ ($.event = \"reconcile\") && ($.claimable >= 0) }"

  metric_transformation {
    name      = "StalledConnections"
    namespace = var.metric_namespace
    value     = "$.claimable"
    unit      = "Count"
  }
}

resource "aws_cloudwatch_metric_alarm" "lease_acquire_failures" {
  alarm_name          = "${var.name}-lease-acquire-failures"
  alarm_description   = "Workers keep failing to acquire leases (refused conditional writes): contention, or clocks that disagree."
  namespace           = var.metric_namespace
  metric_name         = aws_cloudwatch_log_metric_filter.lease_acquire_failures.metric_transformation[0].name
  statistic           = "Sum"
  period              = local.period_s
  evaluation_periods  = 2
  datapoints_to_alarm = 2
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.lease_acquire_failure_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "stalled_connections" {
  alarm_name          = "${var.name}-stalled-connections"
  alarm_description   = "STARTED connections have had an expired lease for ${var.stalled_minutes} minutes: no worker is consuming them (no capacity, or acquisitions failing)."
  namespace           = var.metric_namespace
  metric_name         = aws_cloudwatch_log_metric_filter.stalled_connections.metric_transformation[0].name
  statistic           = "Minimum"
  period              = local.period_s
  evaluation_periods  = local.stalled_periods
  datapoints_to_alarm = local.stalled_periods
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "no_workers" {
  alarm_name          = "${var.name}-no-workers-reporting"
  alarm_description   = "No worker has published ActiveConnections for 5 minutes: the fleet is down (every connection is stalled)."
  namespace           = var.metric_namespace
  metric_name         = "ActiveConnections"
  statistic           = "SampleCount"
  period              = local.period_s
  evaluation_periods  = 1
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "dead_letters" {
  alarm_name          = "${var.name}-notification-dead-letters"
  alarm_description   = "Notifications reached the dead-letter queue: received too often without being deleted (workers failing while handling them?)."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = var.dead_letter_queue_name }
  statistic           = "Maximum"
  period              = local.period_s
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
}
