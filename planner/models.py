"""Scenarios, sizing runs and their results (built on in the scenarios issue)."""
