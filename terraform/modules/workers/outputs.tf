output "cluster_name" {
  description = "Name of the ECS cluster."
  value       = aws_ecs_cluster.fleet.name
}

output "service_name" {
  description = "Name of the worker ECS service."
  value       = aws_ecs_service.worker.name
}

output "egress_ports" {
  description = "The TCP ports the workers' security group lets out."
  value       = [for rule in aws_security_group.worker.egress : rule.from_port]
}

output "log_group_name" {
  description = "The workers' log group (their JSON log lines)."
  value       = aws_cloudwatch_log_group.worker.name
}

output "task_role_arn" {
  description = "ARN of the worker task role."
  value       = aws_iam_role.task.arn
}

output "fault_injection" {
  description = "Whether the task definition enables fault injection."
  value       = aws_ecs_task_definition.worker.enable_fault_injection
}
