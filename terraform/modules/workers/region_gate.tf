# The region activation gate (fleet/region_gate.py): with a standby region, every worker reads its region's
# routing control from Route 53 ARC's data plane (GetRoutingControlState) at every heartbeat.

variable "region_gate" {
  description = "Whether the workers read a region gate (a standby region with the gate): grants the read of region_gate_control_arn."
  type        = bool
  default     = false
}

variable "region_gate_control_arn" {
  description = "This region's routing control (WSFLEET_REGION_GATE_CONTROL)."
  type        = string
  default     = ""
}

data "aws_iam_policy_document" "task_region_gate" {
  statement {
    sid       = "RegionGate"
    actions   = ["route53-recovery-cluster:GetRoutingControlState"]
    resources = [var.region_gate_control_arn]
  }
}

resource "aws_iam_role_policy" "task_region_gate" {
  count  = var.region_gate ? 1 : 0
  name   = "region-gate"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task_region_gate.json
}
