output "alarm_names" {
  description = "Names of this region's alarms."
  value = [
    aws_cloudwatch_metric_alarm.lease_acquire_failures.alarm_name,
    aws_cloudwatch_metric_alarm.stalled_connections.alarm_name,
    aws_cloudwatch_metric_alarm.no_workers.alarm_name,
    aws_cloudwatch_metric_alarm.dead_letters.alarm_name,
  ]
}
