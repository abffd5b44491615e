variable "name" {
  description = "Prefix of the cluster, control panel, routing controls and safety rule names."
  type        = string
}

variable "regions" {
  description = "One routing control per entry: a key (primary, standby) -> the AWS region it gates."
  type        = map(string)
}

variable "wait_period_ms" {
  description = "The assertion rule's evaluation period: ARC refuses changes to the controls this long after one (anti-flapping)."
  type        = number
  default     = 5000
}
