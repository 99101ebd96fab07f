"""Optimizing an exported model for the runtime that will run it."""
