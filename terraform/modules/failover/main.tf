# Route 53 failover for the router: one HTTPS health check per region's execute-api endpoint, and
# PRIMARY / SECONDARY alias records for the custom domain.  Each record points at that region's API
# custom domain (an HTTP API only answers a foreign Host on a custom domain), and failover happens when
# the primary's health check fails: at worst failure_threshold x request_interval_s plus the record TTL
# of the alias target (60 s for API Gateway) after the region stops answering.

resource "aws_route53_health_check" "primary" {
  type              = "HTTPS"
  fqdn              = var.primary.host
  port              = 443
  resource_path     = var.health_check_path
  request_interval  = var.request_interval_s
  failure_threshold = var.failure_threshold
  enable_sni        = true
  tags              = { Name = "wsfleet router primary" }
}

resource "aws_route53_health_check" "standby" {
  type              = "HTTPS"
  fqdn              = var.standby.host
  port              = 443
  resource_path     = var.health_check_path
  request_interval  = var.request_interval_s
  failure_threshold = var.failure_threshold
  enable_sni        = true
  tags              = { Name = "wsfleet router standby" }
}

resource "aws_route53_record" "primary" {
  zone_id         = var.hosted_zone_id
  name            = var.domain_name
  type            = "A"
  set_identifier  = "primary"
  health_check_id = aws_route53_health_check.primary.id

  failover_routing_policy {
    type = "PRIMARY"
  }

  alias {
    name                   = var.primary.target.name
    zone_id                = var.primary.target.zone_id
    evaluate_target_health = true
  }
}

resource "aws_route53_record" "standby" {
  zone_id         = var.hosted_zone_id
  name            = var.domain_name
  type            = "A"
  set_identifier  = "standby"
  health_check_id = aws_route53_health_check.standby.id

  failover_routing_policy {
    type = "SECONDARY"
  }

  alias {
    name                   = var.standby.target.name
    zone_id                = var.standby.target.zone_id
    evaluate_target_health = true
  }
}
