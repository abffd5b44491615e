variable "hosted_zone_id" {
  description = "Route 53 hosted zone that holds domain_name."
  type        = string
}

variable "domain_name" {
  description = "The router's custom domain (e.g. router.example.com): answered by the primary region while its health check passes, by the standby otherwise."
  type        = string
}

variable "primary" {
  description = "The primary region's router: host (its own custom domain <region>.<domain_name>, probed) and the failover domain's regional target (name: what the record points at)."
  type = object({
    host   = string
    target = object({ name = string })
  })
}

variable "standby" {
  description = "The standby region's router, as for primary."
  type = object({
    host   = string
    target = object({ name = string })
  })
}

variable "health_check_path" {
  description = "Path the health checks request with GET over HTTPS; healthy when the connection opens within 4 s and a 2xx or 3xx status arrives within 2 s after it."
  type        = string
}
