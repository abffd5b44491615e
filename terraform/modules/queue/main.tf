# The notification queue and its dead-letter queue, with fleet.schema.queue_attributes()'s values
# (tests/deploy checks them, and maxReceiveCount against schema.MAX_RECEIVES).

locals {
  redrive_policy = {
    deadLetterTargetArn = aws_sqs_queue.dead_letter.arn
    # fleet.schema.MAX_RECEIVES
    maxReceiveCount = 5
  }
}

resource "aws_sqs_queue" "dead_letter" {
  name = var.dead_letter_queue_name
  # Longer than the main queue's retention, so a dead letter outlives the notification it came from.
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = var.kms_key_arn == "" ? true : null
  kms_master_key_id         = var.kms_key_arn == "" ? null : var.kms_key_arn
}

resource "aws_sqs_queue" "notify" {
  name                       = var.queue_name
  visibility_timeout_seconds = 30
  message_retention_seconds  = 345600
  sqs_managed_sse_enabled    = var.kms_key_arn == "" ? true : null
  kms_master_key_id          = var.kms_key_arn == "" ? null : var.kms_key_arn
  redrive_policy             = jsonencode(local.redrive_policy)
}

resource "aws_sqs_queue_redrive_allow_policy" "dead_letter" {
  queue_url = aws_sqs_queue.dead_letter.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.notify.arn]
  })
}

# With a customer-managed key: the queue's messages are encrypted with it, so sending takes GenerateDataKey
# and Decrypt, receiving Decrypt.  (DynamoDB and CloudWatch Logs use the key through its own grants and key
# policy, not the caller's.)
data "aws_iam_policy_document" "use_key" {
  count = var.kms_key_arn == "" ? 0 : 1
  statement {
    sid       = "QueueKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}
