variable "name" {
  description = "Name prefix of every resource in this region."
  type        = string
}

variable "profile" {
  description = "WSFLEET_PROFILE of the router and the workers: blog (the published algorithm) or hardened (ours)."
  type        = string
}

variable "allowed_ws_hosts" {
  description = "WSFLEET_ALLOWED_WS_HOSTS (fleet/allowlist.py): the hosts (host or host:port; a bare host admits only the scheme's default port) a START's ws_url may name, and the networks private addresses may resolve into; the router refuses every other host, and all of them when this is empty."
  type        = list(string)
}

variable "fleet_settings" {
  description = "Other WSFLEET_* variables to set (durations in ms at time scale 1, limits), by variable name, e.g. { WSFLEET_MAX_CONNECTIONS = \"500\" }; the rest keep FleetConfig's defaults (the published values)."
  type        = map(string)
  default     = {}
}

variable "connections_table_name" {
  description = "Name of the connections table (a Global Table: same name in every region)."
  type        = string
}

variable "messages_table_name" {
  description = "Name of the messages table."
  type        = string
}

variable "workers_table_name" {
  description = "Name of the workers table."
  type        = string
}

variable "state_index_name" {
  description = "Name of the connections table's state index, which the worker's reconcile queries."
  type        = string
}

variable "queue_name" {
  description = "Name of this region's notification queue."
  type        = string
}

variable "dead_letter_queue_name" {
  description = "Name of this region's notification dead-letter queue."
  type        = string
}

variable "package_path" {
  description = "The fleet package zip for the router Lambda."
  type        = string
}

variable "package_hash" {
  description = "Base64 SHA-256 of the fleet package zip."
  type        = string
}

variable "dependencies_layer_path" {
  description = "The router's dependencies layer zip."
  type        = string
}

variable "dependencies_layer_hash" {
  description = "Base64 SHA-256 of the dependencies layer zip."
  type        = string
}

variable "events_authorization" {
  description = "Authorization of the router's POST /events route: AWS_IAM or NONE."
  type        = string
}

variable "health_check_path" {
  description = "Path of the router's unauthenticated health route."
  type        = string
}

variable "domain_name" {
  description = "Custom domain of the router (failover); empty for none."
  type        = string
  default     = ""
}

variable "certificate_arn" {
  description = "ACM certificate in this region for domain_name and <region>.<domain_name>."
  type        = string
  default     = ""
}

variable "hosted_zone_id" {
  description = "Route 53 hosted zone of domain_name (this region's <region>.<domain_name> record goes there)."
  type        = string
  default     = ""
}

variable "worker_image" {
  description = "Worker container image."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the worker tasks."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the worker tasks."
  type        = list(string)
}

variable "assign_public_ip" {
  description = "Give each worker task a public IP."
  type        = bool
  default     = false
}

variable "worker_cpu" {
  description = "Worker task CPU units."
  type        = number
  default     = 512
}

variable "worker_memory_mb" {
  description = "Worker task memory in MiB."
  type        = number
  default     = 1024
}

variable "min_tasks" {
  description = "Fewest worker tasks in this region."
  type        = number
}

variable "max_tasks" {
  description = "Most worker tasks in this region."
  type        = number
}

variable "target_connections_per_task" {
  description = "Autoscaling target of average ActiveConnections per task."
  type        = number
}

variable "scale_out_cooldown_s" {
  description = "Autoscaling scale-out cooldown in seconds."
  type        = number
}

variable "scale_in_cooldown_s" {
  description = "Autoscaling scale-in cooldown in seconds."
  type        = number
}

variable "stop_timeout_s" {
  description = "Seconds a stopping worker task has between SIGTERM and SIGKILL (at most 120 on Fargate)."
  type        = number
}

variable "log_retention_days" {
  description = "Days to keep logs."
  type        = number
  default     = 30
}

variable "alarm_actions" {
  description = "ARNs notified by the alarms."
  type        = list(string)
  default     = []
}

variable "worker_egress_ports" {
  description = "TCP ports worker tasks may connect to besides 443 and the ports allowed_ws_hosts names (host:port)."
  type        = list(number)
  default     = []
}

variable "worker_egress_cidr_blocks" {
  description = "Networks worker tasks may connect to on those ports."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "fault_injection" {
  description = "Let AWS FIS inject network faults into the worker tasks (the root sets it with chaos_target)."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key (in this region) of the queues and the log groups; empty: AWS-owned keys."
  type        = string
  default     = ""
}
