# The region activation gate (fleet/region_gate.py) of this region: the Route 53 ARC cluster's endpoints and
# this region's routing control, given to every worker and to the router (fleet_deployment), and the read
# of that control granted to both.

variable "region_gate" {
  description = "Whether this region is gated (a standby deployment with the gate; the root creates the controls)."
  type        = bool
  default     = false
}

variable "region_gate_endpoints" {
  description = "The ARC cluster's endpoints, region=url comma-separated (WSFLEET_REGION_GATE_ENDPOINTS); empty without a gate."
  type        = string
  default     = ""
}

variable "region_gate_control_arn" {
  description = "This region's routing control (WSFLEET_REGION_GATE_CONTROL); empty without a gate."
  type        = string
  default     = ""
}
