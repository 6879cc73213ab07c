"""The plugin's server side: finds traces under the logdir, analyses them in the background,
picks the trace a request names and answers from its index (plugin.py only maps routes here)."""
