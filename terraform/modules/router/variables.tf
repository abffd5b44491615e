variable "name" {
  description = "Name prefix of this region's router resources (function, API, role, log groups)."
  type        = string
}

variable "package_path" {
  description = "Path of the fleet package zip (modules/package output `path`); the function's handler is fleet.router.handler."
  type        = string
}

variable "package_hash" {
  description = "Base64 SHA-256 of the fleet package zip, so a code change redeploys the function."
  type        = string
}

variable "dependencies_layer_path" {
  description = "Path of the zip holding the fleet's runtime dependencies under python/ (aioboto3 and what it pins; the Lambda runtime ships none of them)."
  type        = string
}

variable "dependencies_layer_hash" {
  description = "Base64 SHA-256 of the dependencies layer zip."
  type        = string
}

variable "fleet_environment" {
  description = "Every WSFLEET_* variable of fleet/config.py's ENV_VARS with its value for this region (modules/region builds it); set as the function's environment."
  type        = map(string)
}

variable "connections_table_arn" {
  description = "ARN of the connections table in this region (Global Tables replicas have one ARN per region)."
  type        = string
}

variable "workers_table_arn" {
  description = "ARN of the workers table in this region (the hardened STOP mailbox)."
  type        = string
}

variable "queue_arn" {
  description = "ARN of this region's notification queue."
  type        = string
}

variable "events_authorization" {
  description = "Authorization of the POST /events route: AWS_IAM (callers sign requests with SigV4 for service execute-api and need execute-api:Invoke on the route) or NONE (anyone who knows the URL may START and STOP connections)."
  type        = string
  default     = "AWS_IAM"

  validation {
    condition     = contains(["AWS_IAM", "NONE"], var.events_authorization)
    error_message = "events_authorization must be AWS_IAM or NONE."
  }
}

variable "health_check_path" {
  description = "Path of the unauthenticated GET route that Route 53 health checks probe; it invokes the router like any event, so the router must answer it with 200."
  type        = string
  default     = "/health"
}

variable "throttling_rate_limit" {
  description = "Steady-state requests per second the API accepts before answering 429."
  type        = number
  default     = 500
}

variable "throttling_burst_limit" {
  description = "Burst of requests the API accepts above the rate limit."
  type        = number
  default     = 1000
}

variable "lambda_timeout_s" {
  description = "Function timeout in seconds: one table write and one SQS send, each bounded by WSFLEET_AWS_TIMEOUT_MS (3 s)."
  type        = number
  default     = 10
}

variable "lambda_memory_mb" {
  description = "Function memory in MB (CPU scales with it)."
  type        = number
  default     = 256
}

variable "log_retention_days" {
  description = "Days to keep the function's and the API's logs."
  type        = number
  default     = 30
}

variable "domain_name" {
  description = "Custom domain the failover records answer for (e.g. router.example.com); empty for none. With it, this region's API gets two custom domains, domain_name and <region>.<domain_name>, and its default execute-api endpoint is disabled."
  type        = string
  default     = ""
}

variable "certificate_arn" {
  description = "ACM certificate in this region covering domain_name and <region>.<domain_name> (two names, or domain_name and *.<domain_name>); required when domain_name is set."
  type        = string
  default     = ""
}

variable "hosted_zone_id" {
  description = "Route 53 hosted zone of domain_name, where <region>.<domain_name> is created; required when domain_name is set."
  type        = string
  default     = ""
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key of the queue and the router's log groups; empty: AWS-owned keys."
  type        = string
  default     = ""
}

variable "queue_key_policy" {
  description = "With kms_key_arn: the IAM policy (JSON) that lets a role use the queue's key (modules/queue key_policy_json)."
  type        = string
  default     = ""
}
