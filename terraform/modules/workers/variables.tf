variable "name" {
  description = "Name prefix of this region's worker resources (cluster, service, roles, log group)."
  type        = string
}

variable "image" {
  description = "Worker container image (built from the repository's Dockerfile), e.g. <account>.dkr.ecr.<region>.amazonaws.com/wsfleet-worker:<tag>."
  type        = string
}

variable "fleet_environment" {
  description = "Every WSFLEET_* variable of fleet/config.py's ENV_VARS with its value for this region (modules/region builds it). Empty values are left out of the task definition: FleetConfig treats an unset variable and an empty one alike, and ECS drops empty values (a perpetual diff otherwise)."
  type        = map(string)
}

variable "connections_table_arn" {
  description = "ARN of the connections table in this region."
  type        = string
}

variable "messages_table_arn" {
  description = "ARN of the messages table in this region."
  type        = string
}

variable "workers_table_arn" {
  description = "ARN of the workers table in this region."
  type        = string
}

variable "index_arns" {
  description = "ARNs of the indexes the worker queries (the connections table's state index)."
  type        = list(string)
}

variable "queue_arn" {
  description = "ARN of this region's notification queue."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace the worker publishes ActiveConnections to; PutMetricData is granted for it alone."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the worker tasks' security group."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets the worker tasks run in. They need outbound access to the upstream WebSocket hosts and to DynamoDB, SQS, CloudWatch, CloudWatch Logs and ECR (NAT gateway, public IP, or VPC endpoints)."
  type        = list(string)
}

variable "assign_public_ip" {
  description = "Give each task a public IP (public subnets without a NAT gateway)."
  type        = bool
  default     = false
}

variable "egress_ports" {
  description = "TCP ports worker tasks may connect to (443 for the AWS APIs, and the upstream ports); nothing else leaves the task."
  type        = list(number)
  default     = [443]
}

variable "egress_cidr_blocks" {
  description = "Where worker tasks may connect to (AWS APIs and the upstream WebSocket hosts); workers accept no inbound traffic."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "cpu" {
  description = "Task CPU units (1024 = one vCPU)."
  type        = number
  default     = 512
}

variable "memory_mb" {
  description = "Task memory in MiB."
  type        = number
  default     = 1024
}

variable "cpu_architecture" {
  description = "X86_64 or ARM64; must match the image."
  type        = string
  default     = "X86_64"
}

variable "desired_count" {
  description = "Tasks at creation; autoscaling owns the count afterwards (changes are ignored)."
  type        = number
  default     = 2
}

variable "stop_timeout_s" {
  description = "Seconds between SIGTERM and SIGKILL when a task stops: the worker releases every lease (and, hardened, checkpoints and notifies) in that time. Fargate allows at most 120."
  type        = number
  default     = 120

  validation {
    condition     = var.stop_timeout_s >= 2 && var.stop_timeout_s <= 120
    error_message = "stop_timeout_s must be between 2 and 120 seconds (the Fargate maximum)."
  }
}

variable "log_retention_days" {
  description = "Days to keep the workers' logs."
  type        = number
  default     = 30
}

variable "container_insights" {
  description = "Enable CloudWatch Container Insights on the cluster (per-task CPU and memory metrics, billed as custom metrics)."
  type        = bool
  default     = false
}

variable "fault_injection" {
  description = "Let AWS FIS inject network faults into the tasks (enableFaultInjection); chaos_target sets it."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key of the queue and the workers' log group; empty: AWS-owned keys."
  type        = string
  default     = ""
}

variable "queue_key_policy" {
  description = "With kms_key_arn: the IAM policy (JSON) that lets a role use the queue's key (modules/queue key_policy_json)."
  type        = string
  default     = ""
}
