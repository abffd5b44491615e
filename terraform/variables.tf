# -- where ----------------------------------------------------------------------------------------------
variable "region" {
  description = "The primary region: tables, queue, router and workers."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Prefix of every resource name. With the default, table and queue names equal FleetConfig's defaults and fleet/schema.py's queue names."
  type        = string
  default     = "wsfleet"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name must be 2 to 21 lower-case letters, digits or hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default     = { Project = "wsfleet" }
}

variable "chaos_target" {
  description = "Tag every resource wsfleet:chaos=allowed, the tag `wsfleet aws-preflight` requires before a harness run may touch the deployment. Leave false for a fleet nobody may break on purpose."
  type        = bool
  default     = false
}

variable "upstream_log_group" {
  description = "With chaos_target: the CloudWatch Logs group of the upstream simulator a harness run streams from (its history is the run's ground truth; terraform does not deploy the simulator). Empty: none."
  type        = string
  default     = ""
}

# -- the fleet ------------------------------------------------------------------------------------------
variable "profile" {
  description = "WSFLEET_PROFILE of the router and workers: blog (the published algorithm, flaws included) or hardened (ours)."
  type        = string

  validation {
    condition     = contains(["blog", "hardened"], var.profile)
    error_message = "profile must be blog or hardened (unsafe is for tests only)."
  }
}

variable "allowed_ws_hosts" {
  description = "WSFLEET_ALLOWED_WS_HOSTS entries (fleet/allowlist.py): host or host:port a START event's ws_url may name (a bare host admits only the scheme's default port), [v6]:port, and networks (10.0.0.0/8) private addresses may resolve into; the router refuses every other host, and all of them while this is empty. A malformed entry stops the router and workers at start-up."
  type        = list(string)
}

variable "fleet_settings" {
  description = "Further WSFLEET_* variables by name (durations in ms at time scale 1, limits), e.g. { WSFLEET_MAX_CONNECTIONS = \"500\" }; unset ones keep FleetConfig's defaults, the published values."
  type        = map(string)
  default     = {}
}

variable "worker_image" {
  description = "The worker image built from the repository's Dockerfile and pushed to a registry the tasks can pull from (an ECR repository gets pull rights on that repository only)."
  type        = string
}

variable "standby_worker_image" {
  description = "The worker image for the standby region; empty uses worker_image (cross-region ECR pulls work, but a replicated repository is faster)."
  type        = string
  default     = ""
}

variable "router_source_dir" {
  description = "The fleet package directory zipped as the router Lambda's code; relative paths are from where terraform runs."
  type        = string
  default     = "../fleet"
}

variable "router_dependencies_dir" {
  description = "Directory holding the router's dependencies under python/ (see README, \"Build the router's dependencies\")."
  type        = string
  default     = "build/router-dependencies"
}

variable "events_authorization" {
  description = "Authorization of POST /events: AWS_IAM (senders sign with SigV4 for execute-api and need execute-api:Invoke on the route: output router_events_route_arn) or NONE (anyone with the URL may START and STOP connections)."
  type        = string
  default     = "AWS_IAM"
}

variable "health_check_path" {
  description = "The router's unauthenticated GET route, probed by the Route 53 health checks."
  type        = string
  default     = "/health"
}

# -- network --------------------------------------------------------------------------------------------
variable "vpc_id" {
  description = "VPC of the worker tasks in the primary region."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the worker tasks in the primary region; they need outbound access to the upstream hosts and the AWS APIs."
  type        = list(string)
}

variable "assign_public_ip" {
  description = "Give worker tasks public IPs (public subnets without NAT)."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "A customer-managed KMS key (primary region) for the tables, the queues and the log groups; empty: AWS-owned keys. Its key policy must let DynamoDB, SQS (and EventBridge, which sends death notices) and CloudWatch Logs (logs.<region>.amazonaws.com) use it; the worker and router roles are granted kms:Decrypt and kms:GenerateDataKey on it."
  type        = string
  default     = ""
}

variable "standby_kms_key_arn" {
  description = "With kms_key_arn and a standby region: the key in the standby region (the tables' replicas, the standby's queues and log groups)."
  type        = string
  default     = ""
}

variable "worker_egress_ports" {
  description = "TCP ports worker tasks may connect to besides 443 (AWS APIs, wss://) and the ports allowed_ws_hosts names (host:port); e.g. [80] for ws:// hosts listed without a port. Nothing else leaves a worker."
  type        = list(number)
  default     = []
}

variable "worker_egress_cidr_blocks" {
  description = "Networks worker tasks may connect to on those ports (default anywhere: the AWS APIs' addresses are not fixed)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

# -- capacity and scaling (published values) ------------------------------------------------------------
variable "worker_cpu" {
  description = "Worker task CPU units (1024 = one vCPU)."
  type        = number
  default     = 512
}

variable "worker_memory_mb" {
  description = "Worker task memory in MiB."
  type        = number
  default     = 1024
}

variable "min_tasks" {
  description = "Fewest worker tasks in the primary region."
  type        = number
  default     = 2
}

variable "max_tasks" {
  description = "Most worker tasks in the primary region."
  type        = number
  default     = 20
}

variable "target_connections_per_task" {
  description = "Target tracking: average ActiveConnections per task (published: 700). At the worker cap (WSFLEET_MAX_CONNECTIONS, also 700) the average cannot exceed it, so the published pair never scales out of saturation; see README."
  type        = number
  default     = 700
}

variable "scale_out_cooldown_s" {
  description = "Target tracking scale-out cooldown in seconds (published: 120)."
  type        = number
  default     = 120
}

variable "scale_in_cooldown_s" {
  description = "Target tracking scale-in cooldown in seconds (published: 900)."
  type        = number
  default     = 900
}

variable "stop_timeout_s" {
  description = "Seconds between SIGTERM and SIGKILL for a stopping worker task, its time to release every lease (Fargate maximum: 120)."
  type        = number
  default     = 120
}

# -- data protection and operations ---------------------------------------------------------------------
variable "point_in_time_recovery" {
  description = "Point-in-time recovery on every table and replica."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "DynamoDB deletion protection on every table (turn off before `terraform destroy`)."
  type        = bool
  default     = false
}

variable "log_retention_days" {
  description = "Days to keep worker, router and API logs."
  type        = number
  default     = 30
}

variable "alarm_actions" {
  description = "ARNs (e.g. an SNS topic) notified when an alarm fires or recovers."
  type        = list(string)
  default     = []
}

# -- standby region (optional) --------------------------------------------------------------------------
variable "standby_region" {
  description = "A second region with a Global Tables replica of every table and its own queue, router and workers; empty for a single-region deployment."
  type        = string
  default     = ""
}

variable "standby_vpc_id" {
  description = "VPC of the worker tasks in the standby region."
  type        = string
  default     = ""
}

variable "standby_subnet_ids" {
  description = "Subnets of the worker tasks in the standby region."
  type        = list(string)
  default     = []
}

variable "standby_min_tasks" {
  description = "Fewest worker tasks in the standby region (a warm standby keeps at least one running)."
  type        = number
  default     = 1
}

variable "standby_max_tasks" {
  description = "Most worker tasks in the standby region."
  type        = number
  default     = 20
}

variable "domain_name" {
  description = "Custom domain of the router (e.g. router.example.com), used with a standby region: Route 53 failover records answer for it. Empty (or no standby region): the router is reached at its execute-api URL."
  type        = string
  default     = ""
}

variable "hosted_zone_id" {
  description = "Route 53 hosted zone of domain_name."
  type        = string
  default     = ""
}

variable "certificate_arn" {
  description = "ACM certificate in the primary region covering domain_name and <region>.<domain_name> (the region's own name, which its health check probes): two names, or domain_name and *.<domain_name>."
  type        = string
  default     = ""
}

variable "standby_certificate_arn" {
  description = "ACM certificate in the standby region covering domain_name and <standby_region>.<domain_name>, as certificate_arn."
  type        = string
  default     = ""
}
