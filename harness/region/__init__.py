"""The standby region (issue 12): what Route 53 decides and what clients see (``route53``)."""
