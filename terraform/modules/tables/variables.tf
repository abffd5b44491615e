variable "connections_table_name" {
  description = "Name of the connections table (FleetConfig.connections_table, WSFLEET_CONNECTIONS_TABLE)."
  type        = string
}

variable "messages_table_name" {
  description = "Name of the messages table (FleetConfig.messages_table, WSFLEET_MESSAGES_TABLE)."
  type        = string
}

variable "workers_table_name" {
  description = "Name of the workers table (FleetConfig.workers_table, WSFLEET_WORKERS_TABLE); the hardened profile's per-worker liveness items."
  type        = string
}

variable "replica_regions" {
  description = "Regions that hold a Global Tables (version 2019.11.21) replica of every table; empty for a single-region deployment."
  type        = list(string)
  default     = []
}

variable "point_in_time_recovery" {
  description = "Enable point-in-time recovery on every table and replica."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Refuse DeleteTable (and so `terraform destroy`) on every table until this is turned off."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key of the tables in their own region; empty: AWS-owned keys."
  type        = string
  default     = ""
}

variable "replica_kms_key_arns" {
  description = "Customer-managed KMS key of each replica, by region (required for every replica when kms_key_arn is set)."
  type        = map(string)
  default     = {}
}
