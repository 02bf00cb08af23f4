"""The server's features, one module per group; each has `register(server)`."""
