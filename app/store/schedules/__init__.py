"""Cron and interval schedules and their fires."""
