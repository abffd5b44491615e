output "url" {
  description = "Base URL of this region's router API; events go to url + \"/events\"."
  value       = aws_apigatewayv2_api.router.api_endpoint
}

output "host" {
  description = "Host name of the API's execute-api endpoint (what this region's Route 53 health check probes)."
  value       = replace(aws_apigatewayv2_api.router.api_endpoint, "https://", "")
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
  description = "Regional target of the custom domain (name and hosted zone) for Route 53 alias records; null without a domain."
  value = local.custom_domain ? {
    name    = aws_apigatewayv2_domain_name.router[0].domain_name_configuration[0].target_domain_name
    zone_id = aws_apigatewayv2_domain_name.router[0].domain_name_configuration[0].hosted_zone_id
  } : null
}

output "api_id" {
  description = "Id of the router's API (API Gateway v2): the harness's preflight checks router_url against it."
  value       = aws_apigatewayv2_api.router.id
}
