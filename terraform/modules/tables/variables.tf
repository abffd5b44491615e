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
