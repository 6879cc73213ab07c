"""Server side of the TensorBoard plugin: discovery, background loading, queries, comparison."""
