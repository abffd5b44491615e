output "fis_role_arn" {
  description = "The role FIS experiments assume (`wsfleet aws-plan --role-arn`)."
  value       = aws_iam_role.fis.arn
}

output "harness_policy_arn" {
  description = "The policy to attach to whoever runs the harness against this deployment."
  value       = aws_iam_policy.harness.arn
}
