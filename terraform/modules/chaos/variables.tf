variable "name" {
  description = "Prefix of the role and policy names."
  type        = string
}

variable "table_names" {
  description = "The fleet's DynamoDB tables (connections, messages, workers)."
  type        = list(string)
}

variable "queue_url" {
  description = "URL of the notification queue."
  type        = string
}

variable "cluster" {
  description = "ECS cluster of the workers."
  type        = string
}

variable "service" {
  description = "ECS service of the workers."
  type        = string
}

variable "log_groups" {
  description = "The log groups the harness reads history from (`wsfleet aws-history`, `wsfleet scenario --backend aws`): the workers', the router's, and the upstream simulator's when there is one."
  type        = list(string)
}

variable "router_api_id" {
  description = "Id of the router's API, which the harness's preflight reads (its endpoint, tags and domain mappings)."
  type        = string
}

variable "router_route_arn" {
  description = "execute-api ARN of the router's POST /events, which signed `wsfleet start` / `stop` call."
  type        = string
}
