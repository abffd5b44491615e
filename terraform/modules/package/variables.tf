variable "source_dir" {
  description = "The fleet package directory (the repository's fleet/); every .py under it goes into the zip under fleet/, so the handler fleet.router.handler imports."
  type        = string
}

variable "dependencies_dir" {
  description = "A directory holding the fleet's runtime dependencies under python/ (pip install --target <dir>/python, see terraform/README.md); zipped as the router's Lambda layer."
  type        = string
}

variable "output_dir" {
  description = "Where to write the two zips (fleet-router.zip, fleet-dependencies.zip)."
  type        = string
}
