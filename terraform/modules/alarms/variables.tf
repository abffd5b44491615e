variable "name" {
  description = "Name prefix of this region's alarms."
  type        = string
}

variable "worker_log_group_name" {
  description = "The workers' log group, whose JSON lines the metric filters read."
  type        = string
}

variable "metric_namespace" {
  description = "Namespace of the metrics the filters publish (the fleet's own: \"wsfleet\")."
  type        = string
}

variable "dead_letter_queue_name" {
  description = "Name of the notification dead-letter queue, alarmed on as soon as it holds a message."
  type        = string
}

variable "lease_acquire_failure_threshold" {
  description = "Refused lease acquisitions per 5 minutes, fleet-wide, that raise the alarm when two periods in a row exceed it. Some refusals are normal (two workers racing for one expired lease); a sustained stream means workers fight over leases or clocks disagree."
  type        = number
  default     = 50
}

variable "stalled_minutes" {
  description = "Raise the stalled-connections alarm when every reconcile for this many minutes (rounded up to 5-minute periods) found STARTED connections whose lease had expired (nobody consuming them). The blog profile's worst-case recovery is lease + reconcile, about 80 s."
  type        = number
  default     = 10
}

variable "alarm_actions" {
  description = "ARNs notified when an alarm fires or recovers (e.g. an SNS topic)."
  type        = list(string)
  default     = []
}
