output "path" {
  description = "Path of the router code zip."
  value       = data.archive_file.fleet.output_path
}

output "base64sha256" {
  description = "Base64 SHA-256 of the code zip (the function's source_code_hash), so a code change redeploys."
  value       = data.archive_file.fleet.output_base64sha256
}

output "dependencies_path" {
  description = "Path of the dependencies layer zip."
  value       = data.archive_file.dependencies.output_path
}

output "dependencies_base64sha256" {
  description = "Base64 SHA-256 of the dependencies layer zip."
  value       = data.archive_file.dependencies.output_base64sha256
}
