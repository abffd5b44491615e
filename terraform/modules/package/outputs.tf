output "path" {
  description = "Path of the deployment zip."
  value       = data.archive_file.fleet.output_path
}

output "base64sha256" {
  description = "Base64 SHA-256 of the zip (the Lambda's source_code_hash), so a code change redeploys."
  value       = data.archive_file.fleet.output_base64sha256
}
