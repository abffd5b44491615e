# The region activation gate (fleet/region_gate.py): with a standby region, the router reads its region's
# routing control from Route 53 ARC's data plane (GetRoutingControlState) before every write, and refuses
# writes (503) while the region is not the active one.

variable "region_gate" {
  description = "Whether the router reads a region gate (a standby region with the gate): grants the read of region_gate_control_arn."
  type        = bool
  default     = false
}

variable "region_gate_control_arn" {
  description = "This region's routing control (WSFLEET_REGION_GATE_CONTROL)."
  type        = string
  default     = ""
}

data "aws_iam_policy_document" "router_region_gate" {
  statement {
    sid       = "RegionGate"
    actions   = ["route53-recovery-cluster:GetRoutingControlState"]
    resources = [var.region_gate_control_arn]
  }
}

resource "aws_iam_role_policy" "router_region_gate" {
  count  = var.region_gate ? 1 : 0
  name   = "region-gate"
  role   = aws_iam_role.router.id
  policy = data.aws_iam_policy_document.router_region_gate.json
}
