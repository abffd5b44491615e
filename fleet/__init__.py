"""wsfleet: WebSocket workers that coordinate stream ownership through DynamoDB leases."""
