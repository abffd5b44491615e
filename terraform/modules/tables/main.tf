# The fleet's three DynamoDB tables, mirroring fleet/schema.py (tests/deploy checks keys, attribute types,
# the state index and its projection against schema.py).  Streams are always on with new and old images:
# Global Tables replicas require them, and local runs emulate replication from the same stream.

locals {
  # fleet.schema.STATE_INDEX: the reconcile scan's index over (desired_state, lease_expires_at_ms).
  state_index_name = "desired_state-lease_expires_at_ms-index"
}

data "aws_region" "current" {
  lifecycle {
    postcondition {
      condition     = !contains(var.replica_regions, self.name)
      error_message = "A replica region must differ from the tables' own region."
    }
    precondition {
      condition     = var.kms_key_arn == "" || length(setsubtract(var.replica_regions, keys(var.replica_kms_key_arns))) == 0
      error_message = "With kms_key_arn, every replica region needs its own key (standby_kms_key_arn)."
    }
  }
}

resource "aws_dynamodb_table" "connections" {
  name                        = var.connections_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  stream_enabled              = true
  stream_view_type            = "NEW_AND_OLD_IMAGES"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "desired_state"
    type = "S"
  }

  attribute {
    name = "lease_expires_at_ms"
    type = "N"
  }

  global_secondary_index {
    name            = local.state_index_name
    hash_key        = "desired_state"
    range_key       = "lease_expires_at_ms"
    projection_type = "ALL"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  dynamic "server_side_encryption" {
    for_each = var.kms_key_arn == "" ? [] : [var.kms_key_arn]
    content {
      enabled     = true
      kms_key_arn = server_side_encryption.value
    }
  }

  dynamic "replica" {
    for_each = toset(var.replica_regions)
    content {
      region_name            = replica.value
      point_in_time_recovery = var.point_in_time_recovery
      propagate_tags         = true
      kms_key_arn            = var.kms_key_arn == "" ? null : lookup(var.replica_kms_key_arns, replica.value, null)
    }
  }
}

resource "aws_dynamodb_table" "messages" {
  name                        = var.messages_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  stream_enabled              = true
  stream_view_type            = "NEW_AND_OLD_IMAGES"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "N"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  dynamic "server_side_encryption" {
    for_each = var.kms_key_arn == "" ? [] : [var.kms_key_arn]
    content {
      enabled     = true
      kms_key_arn = server_side_encryption.value
    }
  }

  dynamic "replica" {
    for_each = toset(var.replica_regions)
    content {
      region_name            = replica.value
      point_in_time_recovery = var.point_in_time_recovery
      propagate_tags         = true
      kms_key_arn            = var.kms_key_arn == "" ? null : lookup(var.replica_kms_key_arns, replica.value, null)
    }
  }
}

resource "aws_dynamodb_table" "workers" {
  name                        = var.workers_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  stream_enabled              = true
  stream_view_type            = "NEW_AND_OLD_IMAGES"
  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  dynamic "server_side_encryption" {
    for_each = var.kms_key_arn == "" ? [] : [var.kms_key_arn]
    content {
      enabled     = true
      kms_key_arn = server_side_encryption.value
    }
  }

  dynamic "replica" {
    for_each = toset(var.replica_regions)
    content {
      region_name            = replica.value
      point_in_time_recovery = var.point_in_time_recovery
      propagate_tags         = true
      kms_key_arn            = var.kms_key_arn == "" ? null : lookup(var.replica_kms_key_arns, replica.value, null)
    }
  }
}
