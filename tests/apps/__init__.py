"""Applications for the tests: each plugs into the server the way Linear Road does."""
