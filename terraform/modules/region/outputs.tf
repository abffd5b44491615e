output "region" {
  description = "This region's name."
  value       = local.region
}

output "router_url" {
  description = "Base URL of this region's router: its regional custom domain with a domain, else its execute-api endpoint (events: POST router_url/events)."
  value       = module.router.url
}

output "router_execute_api_endpoint_disabled" {
  description = "Whether this region's router API has its default execute-api endpoint disabled (with a custom domain)."
  value       = module.router.execute_api_endpoint_disabled
}

output "worker_egress_ports" {
  description = "TCP ports the worker tasks may connect to."
  value       = module.workers.egress_ports
}

output "router_api_id" {
  description = "Id of this region's router API (API Gateway v2)."
  value       = module.router.api_id
}

output "router_host" {
  description = "Host of router_url: what this region's Route 53 health check probes."
  value       = module.router.host
}

output "router_events_route_arn" {
  description = "execute-api ARN of POST /events, for execute-api:Invoke grants."
  value       = module.router.events_route_arn
}

output "router_custom_domain_target" {
  description = "The router custom domain's regional target (name, zone_id), or null."
  value       = module.router.custom_domain_target
}

output "queue_url" {
  description = "URL of this region's notification queue."
  value       = module.queue.queue_url
}

output "dead_letter_queue_url" {
  description = "URL of this region's dead-letter queue."
  value       = module.queue.dead_letter_queue_url
}

output "cluster" {
  description = "ECS cluster of this region's workers."
  value       = module.workers.cluster_name
}

output "service" {
  description = "ECS service of this region's workers."
  value       = module.workers.service_name
}

output "worker_log_group" {
  description = "Log group of this region's workers."
  value       = module.workers.log_group_name
}

output "router_log_group" {
  description = "Log group of this region's router function."
  value       = module.router.log_group_name
}

output "fleet_environment" {
  description = "The WSFLEET_* variables this region's fleet runs with (empty values: FleetConfig defaults)."
  value       = local.fleet_environment
}

output "fault_injection" {
  description = "Whether FIS may inject network faults into this region's worker tasks."
  value       = module.workers.fault_injection
}
