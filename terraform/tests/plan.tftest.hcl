# `terraform test` (Terraform >= 1.11, for override_during): plans the root module against mocked AWS
# providers, so no account or credentials are needed; the router package is overridden (no zips are
# built).  tests/deploy runs it offline where terraform and an AWS provider mirror are installed.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
  }
  # Known at plan, so runs can tell the execute-api endpoint from a custom domain.
  mock_resource "aws_apigatewayv2_api" {
    override_during = plan
    defaults = {
      id            = "primary0001"
      api_endpoint  = "https://primary0001.execute-api.us-east-1.amazonaws.com"
      execution_arn = "arn:aws:execute-api:us-east-1:123456789012:primary0001"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{}" }
  }
}

mock_provider "aws" {
  alias = "standby"
  mock_data "aws_region" {
    defaults = { name = "us-west-2" }
  }
  # Known at plan, so runs can tell the execute-api endpoint from a custom domain.
  mock_resource "aws_apigatewayv2_api" {
    override_during = plan
    defaults = {
      id            = "standby0001"
      api_endpoint  = "https://standby0001.execute-api.us-west-2.amazonaws.com"
      execution_arn = "arn:aws:execute-api:us-west-2:123456789012:standby0001"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{}" }
  }
}

override_module {
  target = module.package
  outputs = {
    path                      = "build/fleet-router.zip"
    base64sha256              = "stand-in"
    dependencies_path         = "build/fleet-dependencies.zip"
    dependencies_base64sha256 = "stand-in"
  }
}

# The standby's settings are inert without standby_region (a run sets it to plan a standby region).
variables {
  profile                 = "blog"
  allowed_ws_hosts        = ["stream.example.com", "backup.example.com:8443"]
  worker_image            = "123456789012.dkr.ecr.us-east-1.amazonaws.com/wsfleet-worker:v1"
  vpc_id                  = "vpc-0123456789abcdef0"
  subnet_ids              = ["subnet-0123456789abcdef0"]
  standby_vpc_id          = "vpc-0fedcba9876543210"
  standby_subnet_ids      = ["subnet-0fedcba9876543210"]
  domain_name             = "router.example.com"
  hosted_zone_id          = "Z0123456789ABCDEFGHIJ"
  certificate_arn         = "arn:aws:acm:us-east-1:123456789012:certificate/primary"
  standby_certificate_arn = "arn:aws:acm:us-west-2:123456789012:certificate/standby"
}

run "single_region" {
  command = plan

  assert {
    condition     = length(module.standby) == 0 && length(module.failover) == 0
    error_message = "Without standby_region there is no standby stack and no failover."
  }
  assert {
    condition     = length(module.chaos) == 0 && output.fis_role_arn == null && !module.primary.fault_injection
    error_message = "Without chaos_target, nothing lets FIS or the harness touch the fleet."
  }
  assert {
    condition     = output.standby_region == null && output.region == "us-east-1"
    error_message = "The region outputs do not describe a single-region deployment."
  }
  assert {
    condition     = output.fleet_environment["WSFLEET_ALLOWED_WS_HOSTS"] == "stream.example.com,backup.example.com:8443"
    error_message = "allowed_ws_hosts does not reach WSFLEET_ALLOWED_WS_HOSTS."
  }
  assert {
    condition     = output.fleet_environment["WSFLEET_LEASE_MS"] == ""
    error_message = "Unset durations must stay empty (FleetConfig's defaults)."
  }
  assert {
    condition     = output.region_gate == null && length(module.region_gate) == 0 && output.fleet_environment["WSFLEET_REGION_GATE_ENDPOINTS"] == "" && output.fleet_environment["WSFLEET_REGION_GATE_CONTROL"] == ""
    error_message = "A single region has no region gate."
  }
}

run "chaos_target" {
  command = plan

  variables {
    chaos_target = true
  }

  assert {
    condition     = length(module.chaos) == 1
    error_message = "chaos_target creates the FIS role and the harness operator's policy."
  }
  assert {
    condition     = module.primary.fault_injection
    error_message = "chaos_target must let FIS reach the worker tasks (enableFaultInjection)."
  }
}

run "standby_region_with_failover" {
  command = plan

  variables {
    standby_region = "us-west-2"
    fleet_settings = { WSFLEET_MAX_CONNECTIONS = "500" }
  }

  assert {
    condition     = length(module.standby) == 1 && length(module.failover) == 1
    error_message = "A standby region with a domain gets its own stack and failover records."
  }
  assert {
    condition     = output.router_url == "https://router.example.com"
    error_message = "With failover, router_url is the failover domain."
  }
  assert {
    condition     = output.standby_fleet_environment["WSFLEET_REGION"] == "us-west-2"
    error_message = "The standby stack must run with its own region."
  }
  assert {
    condition     = output.fleet_environment["WSFLEET_MAX_CONNECTIONS"] == "500" && output.standby_fleet_environment["WSFLEET_MAX_CONNECTIONS"] == "500"
    error_message = "fleet_settings must reach both regions."
  }
}

run "custom_domain_disables_the_default_endpoint" {
  command = plan

  variables {
    standby_region = "us-west-2"
  }

  assert {
    condition     = module.primary.router_url == "https://us-east-1.router.example.com" && output.standby_router_url == "https://us-west-2.router.example.com"
    error_message = "With a custom domain each region's router is reached at its regional custom domain, <region>.<domain_name>."
  }
  assert {
    condition     = module.primary.router_host == "us-east-1.router.example.com" && module.standby[0].router_host == "us-west-2.router.example.com"
    error_message = "Each region's health check (modules/failover probes router_host) must probe its regional custom domain: the execute-api endpoint is disabled."
  }
  assert {
    condition     = module.primary.router_execute_api_endpoint_disabled && module.standby[0].router_execute_api_endpoint_disabled
    error_message = "With a custom domain the API's default execute-api endpoint must be disabled."
  }
}

run "router_module_regional_custom_domain" {
  command = plan

  module {
    source = "./modules/router"
  }

  variables {
    name                    = "wsfleet"
    package_path            = "build/fleet-router.zip"
    package_hash            = "stand-in"
    dependencies_layer_path = "build/fleet-dependencies.zip"
    dependencies_layer_hash = "stand-in"
    fleet_environment       = {}
    connections_table_arn   = "arn:aws:dynamodb:us-east-1:123456789012:table/c"
    workers_table_arn       = "arn:aws:dynamodb:us-east-1:123456789012:table/w"
    queue_arn               = "arn:aws:sqs:us-east-1:123456789012:q"
    domain_name             = "router.example.com"
    hosted_zone_id          = "Z0123456789ABCDEFGHIJ"
    certificate_arn         = "arn:aws:acm:us-east-1:123456789012:certificate/primary"
  }

  assert {
    condition     = aws_apigatewayv2_api.router.disable_execute_api_endpoint
    error_message = "With a custom domain the API's default execute-api endpoint must be disabled."
  }
  assert {
    condition     = toset([for domain in aws_apigatewayv2_domain_name.router : domain.domain_name]) == toset(["router.example.com", "us-east-1.router.example.com"]) && length(aws_apigatewayv2_api_mapping.router) == 2
    error_message = "The API needs the failover domain and its regional domain, both mapped to it."
  }
  assert {
    condition     = aws_route53_record.regional[0].name == "us-east-1.router.example.com" && aws_route53_record.regional[0].zone_id == "Z0123456789ABCDEFGHIJ" && aws_route53_record.regional[0].type == "A"
    error_message = "The regional domain needs its alias record in the hosted zone."
  }
}

run "router_module_custom_domain_needs_a_hosted_zone" {
  command = plan

  module {
    source = "./modules/router"
  }

  variables {
    name                    = "wsfleet"
    package_path            = "build/fleet-router.zip"
    package_hash            = "stand-in"
    dependencies_layer_path = "build/fleet-dependencies.zip"
    dependencies_layer_hash = "stand-in"
    fleet_environment       = {}
    connections_table_arn   = "arn:aws:dynamodb:us-east-1:123456789012:table/c"
    workers_table_arn       = "arn:aws:dynamodb:us-east-1:123456789012:table/w"
    queue_arn               = "arn:aws:sqs:us-east-1:123456789012:q"
    domain_name             = "router.example.com"
    hosted_zone_id          = ""
    certificate_arn         = "arn:aws:acm:us-east-1:123456789012:certificate/primary"
  }

  expect_failures = [aws_apigatewayv2_domain_name.router]
}

run "without_a_custom_domain_the_default_endpoint_stays" {
  command = plan

  variables {
    standby_region = "us-west-2"
    domain_name    = ""
  }

  assert {
    condition     = !module.primary.router_execute_api_endpoint_disabled && !module.standby[0].router_execute_api_endpoint_disabled && length(module.failover) == 0
    error_message = "Without a custom domain the execute-api endpoint is the router's only address: it stays on."
  }
}

run "standby_region_has_the_region_gate" {
  command = plan

  variables {
    standby_region = "us-west-2"
  }

  assert {
    condition     = length(module.region_gate) == 1 && output.region_gate != null
    error_message = "A standby region gets the region activation gate (Route 53 ARC) by default."
  }
  assert {
    condition     = module.region_gate[0].assertion_rule.type == "ATLEAST" && module.region_gate[0].assertion_rule.threshold == 1 && module.region_gate[0].assertion_rule.asserted_controls == 3
    error_message = "The gate's safety rule must assert at least one of the two region controls and the hold On."
  }
}

run "standby_region_gate_is_wired_to_every_worker_and_router" {
  command = plan

  variables {
    standby_region = "us-west-2"
  }

  override_module {
    target = module.region_gate
    outputs = {
      endpoints      = "us-east-1=https://host-a.example/v1,us-west-2=https://host-b.example/v1"
      control_arns   = { primary = "arn:aws:route53-recovery-control::123456789012:controlpanel/p/routingcontrol/primary", standby = "arn:aws:route53-recovery-control::123456789012:controlpanel/p/routingcontrol/standby" }
      hold_arn       = "arn:aws:route53-recovery-control::123456789012:controlpanel/p/routingcontrol/hold"
      assertion_rule = { type = "ATLEAST", threshold = 1, asserted_controls = 3 }
    }
  }

  assert {
    condition     = output.fleet_environment["WSFLEET_REGION_GATE_ENDPOINTS"] == "us-east-1=https://host-a.example/v1,us-west-2=https://host-b.example/v1" && output.standby_fleet_environment["WSFLEET_REGION_GATE_ENDPOINTS"] == output.fleet_environment["WSFLEET_REGION_GATE_ENDPOINTS"]
    error_message = "Both regions' workers and routers must be given the gate's cluster endpoints."
  }
  assert {
    condition     = endswith(output.fleet_environment["WSFLEET_REGION_GATE_CONTROL"], "/primary") && endswith(output.standby_fleet_environment["WSFLEET_REGION_GATE_CONTROL"], "/standby")
    error_message = "Each region must read its own routing control."
  }
}

run "standby_region_without_the_gate_fails" {
  command = plan

  variables {
    standby_region = "us-west-2"
    region_gate    = false
  }

  expect_failures = [output.region_gate]
}

run "standby_region_without_the_gate_needs_the_named_unsafe_option" {
  command = plan

  variables {
    standby_region                     = "us-west-2"
    region_gate                        = false
    unsafe_standby_without_region_gate = true
  }

  assert {
    condition     = length(module.region_gate) == 0 && output.region_gate == null && output.standby_fleet_environment["WSFLEET_REGION_GATE_ENDPOINTS"] == ""
    error_message = "With the unsafe option, the standby runs ungated, as asked."
  }
}

# -- trust boundaries: worker egress, customer-managed keys ---------------------------------------------

run "worker_egress_is_443_and_the_allowlists_ports" {
  command = plan

  assert {
    condition     = toset(module.primary.worker_egress_ports) == toset([443, 8443])
    error_message = "By default workers reach TCP 443 and the ports allowed_ws_hosts names (backup.example.com:8443) only."
  }
}

run "worker_egress_can_be_widened" {
  command = plan

  variables {
    worker_egress_ports = [80]
  }

  assert {
    condition     = toset(module.primary.worker_egress_ports) == toset([80, 443, 8443])
    error_message = "worker_egress_ports adds ports to the workers' egress."
  }
}

run "workers_module_egress_and_key" {
  command = plan

  module {
    source = "./modules/workers"
  }

  variables {
    name                  = "wsfleet"
    image                 = "wsfleet-worker:v1"
    fleet_environment     = {}
    connections_table_arn = "arn:aws:dynamodb:us-east-1:123456789012:table/c"
    messages_table_arn    = "arn:aws:dynamodb:us-east-1:123456789012:table/m"
    workers_table_arn     = "arn:aws:dynamodb:us-east-1:123456789012:table/w"
    index_arns            = ["arn:aws:dynamodb:us-east-1:123456789012:table/c/index/i"]
    queue_arn             = "arn:aws:sqs:us-east-1:123456789012:q"
    metric_namespace      = "wsfleet"
    vpc_id                = "vpc-0123456789abcdef0"
    subnet_ids            = ["subnet-0123456789abcdef0"]
    egress_ports          = [443, 8443]
    kms_key_arn           = "arn:aws:kms:us-east-1:123456789012:key/fleet"
    queue_key_policy      = jsonencode({ Version = "2012-10-17", Statement = [] })
  }

  assert {
    condition     = alltrue([for rule in aws_security_group.worker.egress : rule.protocol == "tcp" && rule.from_port == rule.to_port]) && toset([for rule in aws_security_group.worker.egress : rule.from_port]) == toset([443, 8443])
    error_message = "The workers' security group lets out TCP to the listed ports only."
  }
  assert {
    condition     = aws_cloudwatch_log_group.worker.kms_key_id == "arn:aws:kms:us-east-1:123456789012:key/fleet" && length(aws_iam_role_policy.task_kms) == 1
    error_message = "With kms_key_arn the workers' log group is encrypted with it and the task role may use it for the queue."
  }
}

run "queue_with_a_customer_managed_key" {
  command = plan

  module {
    source = "./modules/queue"
  }

  variables {
    queue_name             = "wsfleet-notify"
    dead_letter_queue_name = "wsfleet-notify-dlq"
    kms_key_arn            = "arn:aws:kms:us-east-1:123456789012:key/fleet"
  }

  assert {
    condition     = aws_sqs_queue.notify.kms_master_key_id == var.kms_key_arn && aws_sqs_queue.dead_letter.kms_master_key_id == var.kms_key_arn
    error_message = "With kms_key_arn both queues use it instead of SQS-managed keys."
  }
}

run "tables_with_a_customer_managed_key" {
  command = plan

  module {
    source = "./modules/tables"
  }

  variables {
    connections_table_name = "c"
    messages_table_name    = "m"
    workers_table_name     = "w"
    replica_regions        = ["us-west-2"]
    kms_key_arn            = "arn:aws:kms:us-east-1:123456789012:key/fleet"
    replica_kms_key_arns   = { "us-west-2" = "arn:aws:kms:us-west-2:123456789012:key/standby" }
  }

  assert {
    condition     = alltrue([for table in [aws_dynamodb_table.connections, aws_dynamodb_table.messages, aws_dynamodb_table.workers] : table.server_side_encryption[0].kms_key_arn == var.kms_key_arn && [for r in table.replica : r.kms_key_arn] == ["arn:aws:kms:us-west-2:123456789012:key/standby"]])
    error_message = "With kms_key_arn every table and replica is encrypted with the region's key."
  }
}

run "tables_key_needs_a_key_per_replica_region" {
  command = plan

  module {
    source = "./modules/tables"
  }

  variables {
    connections_table_name = "c"
    messages_table_name    = "m"
    workers_table_name     = "w"
    replica_regions        = ["us-west-2"]
    kms_key_arn            = "arn:aws:kms:us-east-1:123456789012:key/fleet"
  }

  expect_failures = [data.aws_region.current]
}
