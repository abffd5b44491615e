output "url" {
  description = "Base URL of this region's router: its regional custom domain (<region>.<domain_name>) when a domain is set (the execute-api endpoint is then disabled), else the API's execute-api endpoint; events go to url + \"/events\"."
  value       = local.custom_domain ? "https://${local.custom_domains["regional"]}" : aws_apigatewayv2_api.router.api_endpoint
}

output "host" {
  description = "Host of url: what this region's Route 53 health check probes."
  value       = local.custom_domain ? local.custom_domains["regional"] : replace(aws_apigatewayv2_api.router.api_endpoint, "https://", "")
}

output "execute_api_endpoint_disabled" {
  description = "Whether the API's default execute-api endpoint is disabled (it is when a custom domain is set)."
  value       = aws_apigatewayv2_api.router.disable_execute_api_endpoint
}

output "events_route_arn" {
  description = "execute-api ARN of POST /events: grant execute-api:Invoke on it to whoever sends events when the route uses AWS_IAM."
  value       = "${aws_apigatewayv2_api.router.execution_arn}/*/POST/events"
}

output "function_name" {
  description = "Name of the router Lambda function."
  value       = aws_lambda_function.router.function_name
}

output "log_group_name" {
  description = "The router function's log group (one JSON line per event)."
  value       = aws_cloudwatch_log_group.router.name
}

output "custom_domain_target" {
  description = "Regional target of the failover domain (name and hosted zone): what modules/failover's records point at; null without a domain."
  value = local.custom_domain ? {
    name    = aws_apigatewayv2_domain_name.router["failover"].domain_name_configuration[0].target_domain_name
    zone_id = aws_apigatewayv2_domain_name.router["failover"].domain_name_configuration[0].hosted_zone_id
  } : null
}

output "api_id" {
  description = "Id of the router's API (API Gateway v2): the harness's preflight checks router_url against it."
  value       = aws_apigatewayv2_api.router.id
}
