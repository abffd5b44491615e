output "queue_url" {
  description = "URL of the notification queue (WSFLEET_QUEUE_URL)."
  value       = aws_sqs_queue.notify.id
}

output "queue_arn" {
  description = "ARN of the notification queue, for IAM policies."
  value       = aws_sqs_queue.notify.arn
}

output "dead_letter_queue_url" {
  description = "URL of the dead-letter queue."
  value       = aws_sqs_queue.dead_letter.id
}

output "dead_letter_queue_arn" {
  description = "ARN of the dead-letter queue."
  value       = aws_sqs_queue.dead_letter.arn
}

output "key_policy_json" {
  description = "The IAM policy a role needs to send to and receive from the queues with their customer-managed key (empty without one)."
  value       = var.kms_key_arn == "" ? "" : data.aws_iam_policy_document.use_key[0].json
}
