"""Helpers that run the activation scripts in real shells and read the environment back."""
