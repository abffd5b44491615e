# The region activation gate (fleet/region_gate.py) as Route 53 Application Recovery Controller: a cluster
# (five data-plane endpoints in five regions, read with SigV4 by every worker and router through
# GetRoutingControlState, each endpoint tried in turn), one control panel, and one routing control per
# region, plus a hold control that means "a failover is in progress, no region is active".
#
# The safety rule is ARC's assertion rule: at least one of the region controls and the hold is On, so no
# change can leave the fleet with no decision (every region Off by mistake).  ARC has no rule for "at most
# one On", so the one-at-a-time discipline is the failover procedure's (harness/region/routing_control.py):
# in one UpdateRoutingControlStates, the old region Off and the hold On; then the old region's activation
# wait (fleet.region_gate.activation_wait_s: its gate lease, a request timeout and the fencing margin);
# then, in one more, the new region On and the hold Off.  A bare "old Off, new On" would let the two
# regions consume together for a gate lease; "old Off" alone is refused by the rule.
#
# Routing controls are created Off: after the first apply, turn the primary's On (output activate_command).

resource "aws_route53recoverycontrolconfig_cluster" "gate" {
  name = "${var.name}-gate"
}

resource "aws_route53recoverycontrolconfig_control_panel" "gate" {
  name        = "${var.name}-gate"
  cluster_arn = aws_route53recoverycontrolconfig_cluster.gate.arn
}

resource "aws_route53recoverycontrolconfig_routing_control" "region" {
  for_each          = var.regions
  name              = "${var.name}-${each.key}"
  cluster_arn       = aws_route53recoverycontrolconfig_cluster.gate.arn
  control_panel_arn = aws_route53recoverycontrolconfig_control_panel.gate.arn
}

resource "aws_route53recoverycontrolconfig_routing_control" "hold" {
  name              = "${var.name}-failover-hold"
  cluster_arn       = aws_route53recoverycontrolconfig_cluster.gate.arn
  control_panel_arn = aws_route53recoverycontrolconfig_control_panel.gate.arn
}

resource "aws_route53recoverycontrolconfig_safety_rule" "a_decision_always" {
  name              = "${var.name}-a-region-or-the-hold"
  control_panel_arn = aws_route53recoverycontrolconfig_control_panel.gate.arn
  asserted_controls = concat([for key in sort(keys(var.regions)) : aws_route53recoverycontrolconfig_routing_control.region[key].arn], [aws_route53recoverycontrolconfig_routing_control.hold.arn])
  wait_period_ms    = var.wait_period_ms

  rule_config {
    type      = "ATLEAST"
    threshold = 1
    inverted  = false
  }
}
