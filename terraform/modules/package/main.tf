# The router Lambda's deployment package: the fleet package's Python sources, kept under fleet/ in the zip
# (source_dir alone would put them at the zip's root, where `fleet.router` cannot be imported).
# This is the only module that needs the archive provider; tests/deploy validates everything else offline
# with a stand-in that has the same outputs.

data "archive_file" "fleet" {
  type        = "zip"
  output_path = var.output_path

  dynamic "source" {
    for_each = fileset(var.source_dir, "**/*.py")
    content {
      content  = file("${var.source_dir}/${source.value}")
      filename = "fleet/${source.value}"
    }
  }
}
