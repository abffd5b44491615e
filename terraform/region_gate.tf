# The region activation gate (fleet/region_gate.py), created with every standby region: Route 53 ARC's
# cluster, control panel, one routing control per region and the hold, and the assertion rule
# (modules/region_gate); each region's workers and router read their region's control.  A standby region
# without the gate lets the standby's warm fleet claim the streams it sees replicated while the primary
# still consumes them (split brain), so a plan asking for it fails unless the unsafe option says so.

variable "region_gate" {
  description = "With standby_region: create the region activation gate (Route 53 ARC) and wire every worker and router to it. Turning it off also needs unsafe_standby_without_region_gate."
  type        = bool
  default     = true
}

variable "unsafe_standby_without_region_gate" {
  description = "UNSAFE: allow a standby region without the region activation gate (both regions' fleets may consume the same streams at once)."
  type        = bool
  default     = false
}

locals {
  gate = local.standby && var.region_gate
}

module "region_gate" {
  source = "./modules/region_gate"
  count  = local.gate ? 1 : 0

  name    = var.name
  regions = { primary = var.region, standby = var.standby_region }
}

output "region_gate" {
  description = "The region activation gate: the ARC cluster's endpoints (region=url), each region's routing control, the hold, and the command that activates the primary after the first apply (controls are created Off); null without one."
  value = local.gate ? {
    endpoints    = module.region_gate[0].endpoints
    control_arns = module.region_gate[0].control_arns
    hold_arn     = module.region_gate[0].hold_arn
    activate_command = join(" ", ["aws route53-recovery-cluster update-routing-control-state",
      "--routing-control-arn", module.region_gate[0].control_arns["primary"],
    "--routing-control-state On --endpoint-url <one of endpoints> --region <its region>"])
  } : null

  precondition {
    condition     = !local.standby || var.region_gate || var.unsafe_standby_without_region_gate
    error_message = "A standby region without the region activation gate lets both regions consume the same streams (split brain): keep region_gate = true, or set unsafe_standby_without_region_gate = true to accept that."
  }
}
