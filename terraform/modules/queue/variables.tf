variable "queue_name" {
  description = "Name of the notification queue (fleet.schema.QUEUE_NAME); the router sends {\"pk\": ...} to it and workers long-poll it."
  type        = string
}

variable "dead_letter_queue_name" {
  description = "Name of the dead-letter queue (fleet.schema.DLQ_NAME) that takes notifications received too often without being deleted."
  type        = string
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key of both queues; empty: SQS-managed encryption."
  type        = string
  default     = ""
}
