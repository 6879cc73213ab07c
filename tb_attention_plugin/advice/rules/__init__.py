"""One module per advice rule (each defines RULE); the registry (../registry.py) runs them in order."""
