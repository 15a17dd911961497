"""Alerts: what a follow pass raises, the user's rules, and the words an alert says."""
