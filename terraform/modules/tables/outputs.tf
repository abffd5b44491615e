output "connections_table_name" {
  description = "Name of the connections table."
  value       = aws_dynamodb_table.connections.name
}

output "messages_table_name" {
  description = "Name of the messages table."
  value       = aws_dynamodb_table.messages.name
}

output "workers_table_name" {
  description = "Name of the workers table."
  value       = aws_dynamodb_table.workers.name
}

output "state_index_name" {
  description = "Name of the connections table's (desired_state, lease_expires_at_ms) index."
  value       = local.state_index_name
}

output "connections_stream_arn" {
  description = "Stream ARN of the connections table in the primary region."
  value       = aws_dynamodb_table.connections.stream_arn
}
