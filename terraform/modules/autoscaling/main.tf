# Target tracking on the workers' ActiveConnections metric with the published values: 700 connections
# per task on average, 120 s scale-out cooldown, 900 s scale-in cooldown.  The worker publishes the
# metric every WSFLEET_METRIC_INTERVAL_MS (60 s) twice: once without dimensions (one data point per task,
# so the Average statistic is the mean per task: what this policy tracks) and once per WorkerId.

resource "aws_appautoscaling_target" "workers" {
  service_namespace  = "ecs"
  resource_id        = "service/${var.cluster_name}/${var.service_name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.min_tasks
  max_capacity       = var.max_tasks
}

resource "aws_appautoscaling_policy" "active_connections" {
  name               = "${var.service_name}-active-connections"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.workers.service_namespace
  resource_id        = aws_appautoscaling_target.workers.resource_id
  scalable_dimension = aws_appautoscaling_target.workers.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.target_connections_per_task
    scale_out_cooldown = var.scale_out_cooldown_s
    scale_in_cooldown  = var.scale_in_cooldown_s

    customized_metric_specification {
      namespace   = var.metric_namespace
      metric_name = "ActiveConnections"
      statistic   = "Average"
      unit        = "Count"
    }
  }
}
