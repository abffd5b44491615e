# What the harness reads (`terraform output -json`) to target this deployment; terraform/README.md lists
# them.  Values are for the primary region; standby_* for the standby region (null without one).

output "region" {
  description = "The primary region (AWS_REGION and WSFLEET_REGION of fleet processes)."
  value       = module.primary.region
}

output "router_url" {
  description = "Base URL of the router: the failover domain when one is set, else the primary region's API. Events: POST router_url/events."
  value       = local.failover ? module.failover[0].router_url : module.primary.router_url
}

output "router_api_id" {
  description = "Id of the primary region's router API (API Gateway v2): `wsfleet aws-preflight` checks that router_url is this API (its endpoint or a custom domain mapped to it) and that it carries the chaos tag before anything is signed or sent."
  value       = module.primary.router_api_id
}

output "router_events_route_arn" {
  description = "execute-api ARN of the primary POST /events route (grant execute-api:Invoke on it when events_authorization is AWS_IAM)."
  value       = module.primary.router_events_route_arn
}

output "connections_table" {
  description = "Connections table name (WSFLEET_CONNECTIONS_TABLE)."
  value       = module.tables.connections_table_name
}

output "messages_table" {
  description = "Messages table name (WSFLEET_MESSAGES_TABLE)."
  value       = module.tables.messages_table_name
}

output "workers_table" {
  description = "Workers table name (WSFLEET_WORKERS_TABLE)."
  value       = module.tables.workers_table_name
}

output "state_index" {
  description = "The connections table's state index (fleet.schema.STATE_INDEX)."
  value       = module.tables.state_index_name
}

output "queue_url" {
  description = "The primary region's notification queue (WSFLEET_QUEUE_URL)."
  value       = module.primary.queue_url
}

output "dead_letter_queue_url" {
  description = "The primary region's notification dead-letter queue."
  value       = module.primary.dead_letter_queue_url
}

output "cluster" {
  description = "ECS cluster of the primary region's workers."
  value       = module.primary.cluster
}

output "service" {
  description = "ECS service of the primary region's workers."
  value       = module.primary.service
}

output "worker_log_group" {
  description = "CloudWatch Logs group of the primary region's workers."
  value       = module.primary.worker_log_group
}

output "router_log_group" {
  description = "CloudWatch Logs group of the primary region's router function."
  value       = module.primary.router_log_group
}

output "fleet_environment" {
  description = "The WSFLEET_* variables the primary region's fleet runs with; empty values mean FleetConfig's default."
  value       = module.primary.fleet_environment
}

output "standby_region" {
  description = "The standby region, or null."
  value       = local.standby ? module.standby[0].region : null
}

output "standby_router_url" {
  description = "Base URL of the standby region's router (its own <region>.<domain_name> with a domain, else its execute-api endpoint), or null."
  value       = local.standby ? module.standby[0].router_url : null
}

output "standby_queue_url" {
  description = "The standby region's notification queue, or null."
  value       = local.standby ? module.standby[0].queue_url : null
}

output "standby_cluster" {
  description = "ECS cluster of the standby region's workers, or null."
  value       = local.standby ? module.standby[0].cluster : null
}

output "standby_service" {
  description = "ECS service of the standby region's workers, or null."
  value       = local.standby ? module.standby[0].service : null
}

output "standby_fleet_environment" {
  description = "The WSFLEET_* variables of the standby region's fleet, or null."
  value       = local.standby ? module.standby[0].fleet_environment : null
}

output "fis_role_arn" {
  description = "With chaos_target: the role FIS experiments assume (`wsfleet aws-plan` takes it from here)."
  value       = var.chaos_target ? module.chaos[0].fis_role_arn : null
}

output "harness_policy_arn" {
  description = "With chaos_target: the policy to attach to whoever runs the harness against this deployment."
  value       = var.chaos_target ? module.chaos[0].harness_policy_arn : null
}
