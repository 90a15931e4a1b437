"""Alerts: the alert model, Block Kit rendering, the persistent outbox, Slack delivery."""
