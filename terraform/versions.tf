terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.80, < 6.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3.0"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = merge(var.tags, var.chaos_target ? { "wsfleet:chaos" = "allowed" } : {})
  }
}

# Always configured (a provider cannot be conditional); used only when standby_region is set.
provider "aws" {
  alias  = "standby"
  region = var.standby_region != "" ? var.standby_region : var.region
  default_tags {
    tags = merge(var.tags, var.chaos_target ? { "wsfleet:chaos" = "allowed" } : {})
  }
}
