variable "source_dir" {
  description = "The fleet package directory (the repository's fleet/); every .py under it goes into the zip under fleet/, so the handler fleet.router.handler imports."
  type        = string
}

variable "output_path" {
  description = "Where to write the Lambda deployment zip."
  type        = string
}
