# Route 53 failover for the router: one HTTPS health check per region's own custom domain
# (<region>.<domain_name>, modules/router: the APIs' execute-api endpoints are disabled), and
# PRIMARY / SECONDARY CNAME records for the custom domain.  Each record points at that region's API
# custom domain (an HTTP API only answers a foreign Host on a custom domain), and failover happens when
# the primary's health check fails: at worst failure_threshold x request_interval_s plus the record TTL
# after the region stops answering.  CNAMEs, not aliases, so the TTL clients cache is ours (an alias
# takes its target's) and the one the harness measures with.
#
# The health checks' interval and threshold and the records' TTL come from timings.json, the one source the
# harness's experiment reads too (harness/region/route53.py DEPLOYED): fast checks (10 s, billed higher)
# x 3 and a 30 s TTL, so detection is about 30 s and a client reaches the standby about 60 s after the
# primary stops answering; with 30 s checks detection alone would be 90 s.

locals {
  timings = jsondecode(file("${path.module}/timings.json"))
}

resource "aws_route53_health_check" "primary" {
  type              = "HTTPS"
  fqdn              = var.primary.host
  port              = 443
  resource_path     = var.health_check_path
  request_interval  = local.timings.request_interval_s
  failure_threshold = local.timings.failure_threshold
  enable_sni        = true
  tags              = { Name = "wsfleet router primary" }
}

resource "aws_route53_health_check" "standby" {
  type              = "HTTPS"
  fqdn              = var.standby.host
  port              = 443
  resource_path     = var.health_check_path
  request_interval  = local.timings.request_interval_s
  failure_threshold = local.timings.failure_threshold
  enable_sni        = true
  tags              = { Name = "wsfleet router standby" }
}

resource "aws_route53_record" "primary" {
  zone_id         = var.hosted_zone_id
  name            = var.domain_name
  type            = "CNAME"
  ttl             = local.timings.record_ttl_s
  records         = [var.primary.target.name]
  set_identifier  = "primary"
  health_check_id = aws_route53_health_check.primary.id

  failover_routing_policy {
    type = "PRIMARY"
  }
}

resource "aws_route53_record" "standby" {
  zone_id         = var.hosted_zone_id
  name            = var.domain_name
  type            = "CNAME"
  ttl             = local.timings.record_ttl_s
  records         = [var.standby.target.name]
  set_identifier  = "standby"
  health_check_id = aws_route53_health_check.standby.id

  failover_routing_policy {
    type = "SECONDARY"
  }
}
