output "policy_arn" {
  description = "ARN of the target-tracking policy."
  value       = aws_appautoscaling_policy.active_connections.arn
}
