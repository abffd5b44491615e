variable "cluster_name" {
  description = "ECS cluster of the worker service."
  type        = string
}

variable "service_name" {
  description = "The worker ECS service to scale."
  type        = string
}

variable "min_tasks" {
  description = "Fewest worker tasks."
  type        = number
  default     = 2
}

variable "max_tasks" {
  description = "Most worker tasks."
  type        = number
  default     = 20
}

variable "metric_namespace" {
  description = "Namespace of the worker's ActiveConnections metric (fleet/store.py publishes \"wsfleet\")."
  type        = string
  default     = "wsfleet"
}

variable "target_connections_per_task" {
  description = "Target of the average ActiveConnections per task (published: 700). Workers refuse connections beyond WSFLEET_MAX_CONNECTIONS (700), so an average can only exceed a target at that cap when tasks are over it: with equal values the policy never scales out from saturation. Set it below max_connections (e.g. 560) to scale before tasks are full."
  type        = number
  default     = 700
}

variable "scale_out_cooldown_s" {
  description = "Seconds after a scale-out before another (published: 120)."
  type        = number
  default     = 120
}

variable "scale_in_cooldown_s" {
  description = "Seconds after a scale-in before another (published: 900); each scale-in drops a task's connections until others reacquire them."
  type        = number
  default     = 900
}
