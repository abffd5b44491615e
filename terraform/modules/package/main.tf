# The router Lambda's code and its dependencies layer.  The code zip holds the fleet package's Python
# sources under fleet/ (source_dir alone would put them at the zip's root, where `fleet.router` cannot
# be imported).  The layer holds aioboto3 and what it pins: fleet.router imports fleet.aws, and the
# Lambda runtime ships none of them.
# This is the only module that needs the archive provider; tests/deploy validates the rest offline with
# a stand-in that has the same outputs.

data "archive_file" "fleet" {
  type             = "zip"
  output_path      = "${var.output_dir}/fleet-router.zip"
  output_file_mode = "0644"

  dynamic "source" {
    for_each = fileset(var.source_dir, "**/*.py")
    content {
      content  = file("${var.source_dir}/${source.value}")
      filename = "fleet/${source.value}"
    }
  }
}

data "archive_file" "dependencies" {
  type             = "zip"
  source_dir       = var.dependencies_dir
  output_path      = "${var.output_dir}/fleet-dependencies.zip"
  output_file_mode = "0644"
  excludes         = ["**/__pycache__/**"]

  lifecycle {
    precondition {
      condition     = length(fileset(var.dependencies_dir, "python/aiobotocore/*.py")) > 0
      error_message = "No dependencies in ${var.dependencies_dir}/python: build them first (terraform/README.md, \"Build the router's dependencies\")."
    }
  }
}
