"""The chaos and disaster-recovery harness around the fleet."""
