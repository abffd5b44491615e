# wsfleet on AWS: the global tables, then one `region` module per region (queue, router, workers,
# autoscaling, alarms), and Route 53 failover between the two when a standby region and a domain are set.
# Module by module:
#   modules/tables      connections (state index, PITR), messages, workers; Global Tables replicas
#   modules/queue       notification queue + dead-letter queue (maxReceiveCount = schema.MAX_RECEIVES)
#   modules/package     the router's code zip (fleet/) and dependencies layer zip
#   modules/region      queue + router + workers + autoscaling + alarms of one region
#   modules/failover    health checks and PRIMARY / SECONDARY records for the router's domain
#   modules/region_gate with a standby region: the Route 53 ARC cluster, control panel, routing controls and
#                       safety rule of the region activation gate (region_gate.tf)
#   modules/chaos       with chaos_target: the FIS experiment role and the harness operator's policy
# tests/deploy checks these files against fleet/schema.py, fleet/config.py and the AWS calls in fleet/.

locals {
  standby  = var.standby_region != ""
  failover = local.standby && var.domain_name != ""
}

module "tables" {
  source                 = "./modules/tables"
  connections_table_name = "${var.name}-connections"
  messages_table_name    = "${var.name}-messages"
  workers_table_name     = "${var.name}-workers"
  replica_regions        = local.standby ? [var.standby_region] : []
  point_in_time_recovery = var.point_in_time_recovery
  deletion_protection    = var.deletion_protection
  kms_key_arn            = var.kms_key_arn
  replica_kms_key_arns   = local.standby && var.standby_kms_key_arn != "" ? { (var.standby_region) = var.standby_kms_key_arn } : {}
}

module "package" {
  source           = "./modules/package"
  source_dir       = var.router_source_dir
  dependencies_dir = var.router_dependencies_dir
  output_dir       = "${path.root}/build"
}

module "primary" {
  source = "./modules/region"

  name                    = var.name
  profile                 = var.profile
  allowed_ws_hosts        = var.allowed_ws_hosts
  fleet_settings          = var.fleet_settings
  connections_table_name  = module.tables.connections_table_name
  messages_table_name     = module.tables.messages_table_name
  workers_table_name      = module.tables.workers_table_name
  state_index_name        = module.tables.state_index_name
  queue_name              = "${var.name}-notify"
  dead_letter_queue_name  = "${var.name}-notify-dlq"
  package_path            = module.package.path
  package_hash            = module.package.base64sha256
  dependencies_layer_path = module.package.dependencies_path
  dependencies_layer_hash = module.package.dependencies_base64sha256
  events_authorization    = var.events_authorization
  health_check_path       = var.health_check_path
  domain_name             = local.failover ? var.domain_name : ""
  certificate_arn         = var.certificate_arn
  hosted_zone_id          = local.failover ? var.hosted_zone_id : ""

  worker_image                = var.worker_image
  vpc_id                      = var.vpc_id
  subnet_ids                  = var.subnet_ids
  assign_public_ip            = var.assign_public_ip
  worker_egress_ports         = var.worker_egress_ports
  worker_egress_cidr_blocks   = var.worker_egress_cidr_blocks
  kms_key_arn                 = var.kms_key_arn
  worker_cpu                  = var.worker_cpu
  worker_memory_mb            = var.worker_memory_mb
  min_tasks                   = var.min_tasks
  max_tasks                   = var.max_tasks
  target_connections_per_task = var.target_connections_per_task
  scale_out_cooldown_s        = var.scale_out_cooldown_s
  scale_in_cooldown_s         = var.scale_in_cooldown_s
  stop_timeout_s              = var.stop_timeout_s
  fault_injection             = var.chaos_target
  log_retention_days          = var.log_retention_days
  alarm_actions               = var.alarm_actions

  region_gate             = local.gate
  region_gate_endpoints   = local.gate ? module.region_gate[0].endpoints : ""
  region_gate_control_arn = local.gate ? module.region_gate[0].control_arns["primary"] : ""
}

# With chaos_target: the FIS experiment role and the harness operator's policy (modules/chaos).
module "chaos" {
  source           = "./modules/chaos"
  count            = var.chaos_target ? 1 : 0
  name             = var.name
  table_names      = [module.tables.connections_table_name, module.tables.messages_table_name, module.tables.workers_table_name]
  queue_url        = module.primary.queue_url
  cluster          = module.primary.cluster
  service          = module.primary.service
  log_groups       = compact([module.primary.worker_log_group, module.primary.router_log_group, var.upstream_log_group])
  router_route_arn = module.primary.router_events_route_arn
  router_api_id    = module.primary.router_api_id
}

module "standby" {
  source    = "./modules/region"
  count     = local.standby ? 1 : 0
  providers = { aws = aws.standby }

  name                    = var.name
  profile                 = var.profile
  allowed_ws_hosts        = var.allowed_ws_hosts
  fleet_settings          = var.fleet_settings
  connections_table_name  = module.tables.connections_table_name
  messages_table_name     = module.tables.messages_table_name
  workers_table_name      = module.tables.workers_table_name
  state_index_name        = module.tables.state_index_name
  queue_name              = "${var.name}-notify"
  dead_letter_queue_name  = "${var.name}-notify-dlq"
  package_path            = module.package.path
  package_hash            = module.package.base64sha256
  dependencies_layer_path = module.package.dependencies_path
  dependencies_layer_hash = module.package.dependencies_base64sha256
  events_authorization    = var.events_authorization
  health_check_path       = var.health_check_path
  domain_name             = local.failover ? var.domain_name : ""
  certificate_arn         = var.standby_certificate_arn
  hosted_zone_id          = local.failover ? var.hosted_zone_id : ""

  worker_image                = var.standby_worker_image != "" ? var.standby_worker_image : var.worker_image
  vpc_id                      = var.standby_vpc_id
  subnet_ids                  = var.standby_subnet_ids
  assign_public_ip            = var.assign_public_ip
  worker_egress_ports         = var.worker_egress_ports
  worker_egress_cidr_blocks   = var.worker_egress_cidr_blocks
  kms_key_arn                 = var.standby_kms_key_arn
  worker_cpu                  = var.worker_cpu
  worker_memory_mb            = var.worker_memory_mb
  min_tasks                   = var.standby_min_tasks
  max_tasks                   = var.standby_max_tasks
  target_connections_per_task = var.target_connections_per_task
  scale_out_cooldown_s        = var.scale_out_cooldown_s
  scale_in_cooldown_s         = var.scale_in_cooldown_s
  stop_timeout_s              = var.stop_timeout_s
  fault_injection             = var.chaos_target
  log_retention_days          = var.log_retention_days
  alarm_actions               = var.alarm_actions

  region_gate             = local.gate
  region_gate_endpoints   = local.gate ? module.region_gate[0].endpoints : ""
  region_gate_control_arn = local.gate ? module.region_gate[0].control_arns["standby"] : ""
}

module "failover" {
  source = "./modules/failover"
  count  = local.failover ? 1 : 0

  hosted_zone_id    = var.hosted_zone_id
  domain_name       = var.domain_name
  health_check_path = var.health_check_path
  primary = {
    host   = module.primary.router_host
    target = module.primary.router_custom_domain_target
  }
  standby = {
    host   = module.standby[0].router_host
    target = module.standby[0].router_custom_domain_target
  }
}
