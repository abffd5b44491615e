output "router_url" {
  description = "The failover URL of the router (events: POST router_url/events)."
  value       = "https://${var.domain_name}"
}

output "health_check_ids" {
  description = "Route 53 health check ids (primary, standby)."
  value       = { primary = aws_route53_health_check.primary.id, standby = aws_route53_health_check.standby.id }
}
