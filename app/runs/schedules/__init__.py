"""Schedules (DESIGN §21): runs that start themselves on a cron, each due time fired exactly
once across replicas and restarts, every firing kept."""
