output "endpoints" {
  description = "The cluster's data-plane endpoints as WSFLEET_REGION_GATE_ENDPOINTS takes them: region=url, comma-separated."
  value       = join(",", [for endpoint in aws_route53recoverycontrolconfig_cluster.gate.cluster_endpoints : "${endpoint.region}=${endpoint.endpoint}"])
}

output "control_arns" {
  description = "Each region's routing control (WSFLEET_REGION_GATE_CONTROL), by key."
  value       = { for key, control in aws_route53recoverycontrolconfig_routing_control.region : key => control.arn }
}

output "hold_arn" {
  description = "The hold control: On while a failover is in progress and no region is active."
  value       = aws_route53recoverycontrolconfig_routing_control.hold.arn
}

output "safety_rule_arn" {
  description = "The assertion rule: at least one region control or the hold On."
  value       = aws_route53recoverycontrolconfig_safety_rule.a_decision_always.arn
}

output "assertion_rule" {
  description = "The safety rule as configured: its type, threshold and how many controls it asserts."
  value = {
    type              = aws_route53recoverycontrolconfig_safety_rule.a_decision_always.rule_config[0].type
    threshold         = aws_route53recoverycontrolconfig_safety_rule.a_decision_always.rule_config[0].threshold
    asserted_controls = length(aws_route53recoverycontrolconfig_safety_rule.a_decision_always.asserted_controls)
  }
}
