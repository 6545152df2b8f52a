"""pytest plugin (entry point `journal`): fixtures for testing handlers."""
